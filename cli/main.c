/*
 * main.c — the `tpk` command: global options, help texts and dispatch
 * through the command table. Each command lives in its own file
 * (check.c, dump.c) and returns an exit status; see cli.h.
 */
#include "cli/cli.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

static int cli_help(const CliCommand *cmd, int argc, char **argv);

static const char MAIN_HELP_HEAD[] =
    "tpk " TPK_VERSION " - a kernel toolkit for TPU-style accelerators\n"
    "\n"
    "tpk compiles kernels written in the .tpk language: tile-level programs in\n"
    "the spirit of Pallas, Triton and Helion. A kernel loops over tiles of its\n"
    "tensors (`for i in tiles(M, BM)`), loads blocks, computes with dot,\n"
    "reductions and elementwise math, and stores blocks; tunables such as BM are\n"
    "compile-time choices. tpk checks a .tpk file once (names, dtypes, shapes;\n"
    "every error with its file:line:col), turns each kernel into tpk's IR, and\n"
    "runs it on this machine's CPU (generated C, compiled in a millisecond) or\n"
    "on a simulated TPU chip, which computes the same values and reports the\n"
    "time the chip would take. It tunes block sizes, benchmarks kernels against\n"
    "OpenBLAS and PyTorch, and ships a standard library compiled ahead of time\n"
    "(std:softmax.tpk, std:matmul.tpk, ...).\n"
    "\n"
    "Usage: tpk COMMAND [OPTIONS] [FILE...]\n"
    "       tpk help [COMMAND]\n"
    "\n"
    "Commands:\n";

static const char MAIN_HELP_TAIL[] =
    "\n"
    "Options:\n"
    "  -h, --help     show this help\n"
    "  --version      print the version and exit\n"
    "\n"
    "A FILE may be `std:NAME`: a file of the standard kernel library built into\n"
    "tpk, by file or kernel name (std:softmax.tpk, std:flash_attention); its\n"
    "kernels run the library's ahead-of-time code, with nothing to compile.\n"
    "\n"
    "Exit status: 0 on success, 1 when an input file has errors or cannot be\n"
    "read, 2 when the command line is wrong.\n"
    "\n"
    "Examples:\n"
    "  tpk check softmax.tpk                       report errors, or `softmax.tpk: ok (1 kernel)`\n"
    "  tpk run std:softmax.tpk -k softmax --shape M=4096,N=4096\n"
    "  tpk dump --ir softmax.tpk --bind M=1024,N=512 --tune BM=16\n"
    "  tpk help dump                               every option of `dump`\n"
    "\n"
    "Learn more: tutorials/01-first-kernel.md (a first kernel, step by step) and\n"
    "dsl/README.md (the language reference).\n";

static const char CHECK_HELP[] =
    "Usage: tpk check [-q] FILE...\n"
    "\n"
    "Parse and check each .tpk FILE against the rules of the language: syntax,\n"
    "names, dtypes, shapes, tunables, stores. Errors go to stderr in the form\n"
    "\n"
    "  FILE:LINE:COL: error: what is wrong\n"
    "     the source line\n"
    "     ^~~~ under the culprit\n"
    "  hint: how to fix it (when there is one)\n"
    "\n"
    "and a file with several errors reports all of them. For each clean file one\n"
    "line goes to stdout: `FILE: ok (N kernels)`. Nothing is run or generated.\n"
    "A FILE of `-` reads standard input.\n"
    "\n"
    "Options:\n"
    "  -q, --quiet    print nothing for clean files; errors are still printed\n"
    "  -h, --help     show this help\n"
    "\n"
    "Exit status: 0 when every file is clean, 1 when any file has an error or\n"
    "cannot be read (the other files are still checked), 2 when the command\n"
    "line is wrong.\n"
    "\n"
    "Examples:\n"
    "  tpk check softmax.tpk                   one file\n"
    "  tpk check -q kernels/*.tpk              many files; print only problems\n"
    "  echo 'kernel copy(x: f32[N]) -> (y: f32[N]) { y = x; }' | tpk check -\n";

static const char DUMP_HELP[] =
    "Usage: tpk dump (--ast | --ir | --lowered | --c) FILE [--kernel NAME] [--bind LIST]\n"
    "                [--tune LIST]\n"
    "\n"
    "Print what the compiler sees in FILE, on stdout:\n"
    "\n"
    "  --ast   the syntax tree the parser built, as an indented S-expression.\n"
    "          Only parsing is done, so this works on files that do not check.\n"
    "  --ir    the IR the checker builds: one `kernel @NAME(...)` per .tpk kernel,\n"
    "          in the text form every later stage reads (ir/ir.h describes\n"
    "          it). Shape symbols you do not bind stay symbolic (`f32[M,N]`);\n"
    "          tunables you do not choose take their first (default) value.\n"
    "  --lowered  the IR after the host's passes (folding, CSE, dead code, tiling\n"
    "          of whole-array statements) with their decisions: accumulating\n"
    "          dots (`dot %a, %b, %acc`), ops computed inside their user's loop\n"
    "          (`fused=true`); needs every shape symbol bound.\n"
    "  --c     the C the host backend compiles, with the .tpk line of each\n"
    "          statement as a comment; needs every shape symbol bound.\n"
    "\n"
    "Options (before or after FILE; a value follows as the next argument or\n"
    "after '=', as in --bind=M=1024):\n"
    "  --ast             print the syntax tree\n"
    "  --ir              print the IR\n"
    "  --lowered         print the IR after the host passes\n"
    "  --c               print the generated C\n"
    "  --kernel NAME     only the kernel NAME (default: every kernel in FILE)\n"
    "  --bind LIST       give shape symbols sizes: LIST is NAME=INTEGER[,NAME=INTEGER...],\n"
    "                    e.g. --bind M=1024,N=512 (not with --ast; may be repeated)\n"
    "  --tune LIST       choose tunables, e.g. --tune BM=16 (not with --ast; may be\n"
    "                    repeated)\n"
    "  -h, --help        show this help\n"
    "\n"
    "A name in --bind must be a shape symbol of a dumped kernel (M in x: f32[M, N]),\n"
    "and a name in --tune one of its tunables (BM in `tune BM in [8, 16]`).\n"
    "\n"
    "Exit status: 0 on success, 1 when FILE has errors or cannot be read, 2 when\n"
    "the command line is wrong (including a --kernel, --bind or --tune name that\n"
    "FILE does not define).\n"
    "\n"
    "Examples:\n"
    "  tpk dump --ast add.tpk\n"
    "  tpk dump --ir softmax.tpk --bind M=1024,N=512 --tune BM=16\n"
    "  tpk dump --ir kernels.tpk --kernel matmul --tune BM=256,BN=128,BK=512\n"
    "  tpk dump --c softmax.tpk --bind M=1024,N=512\n";

static const char RUN_HELP[] =
    "Usage: tpk run FILE [--kernel NAME] --shape LIST [options]\n"
    "\n"
    "Run a kernel on a device: allocate its tensors from the sizes in --shape, fill\n"
    "the inputs from .npy files or with seeded random data, launch it, and show the\n"
    "time of the first call (which compiles) and of later calls (steady state).\n"
    "\n"
    "Options:\n"
    "  --kernel, -k NAME    the kernel to run (may be left out if FILE has one)\n"
    "  --shape LIST         sizes of the shape symbols: M=1024,N=512 (all are needed)\n"
    "  --scalar LIST        values of scalar parameters: eps=1e-5,lr=0.01\n"
    "  --tune LIST          tunables, each one of its declared values: BM=256\n"
    "  --inputs LIST        inputs from .npy files: x=a.npy,y=b.npy; others are random\n"
    "                       (floats uniform in [-1, 1), integers in [0, 8)). A file\n"
    "                       holds the parameter's shape and dtype, or for a float\n"
    "                       parameter float32 or float64, rounded to nearest even\n"
    "                       (NumPy has no bf16 or f8: float32 is how to give them),\n"
    "                       or int64 for an i32 parameter (each value must fit);\n"
    "                       a float64 file is rounded, and an int64 file converted,\n"
    "                       with a note on stderr; any other dtype is an error\n"
    "  --seed S             seed of the random inputs (default 0)\n"
    "  --check              compare outputs with the reference interpreter, within\n"
    "                       tolerances of the output dtype (the absolute part scaled\n"
    "                       by the largest output, since accumulation orders may\n"
    "                       differ); report the worst element\n"
    "  --checked            run the kernel in the reference interpreter's checked mode\n"
    "                       and report, with their .tpk lines, out-of-range indices,\n"
    "                       two grid instances writing one element, reads of a\n"
    "                       copy_async target before its wait, uninitialized reads\n"
    "  --out DIR            write every output (and inout) as DIR/NAME.npy\n"
    "                       (bf16 and f8 outputs are written as float32); DIR is\n"
    "                       created if missing and may be a link to a folder. Each\n"
    "                       file is written whole to a temporary file in DIR, then\n"
    "                       renamed over NAME.npy; a symbolic link where a file\n"
    "                       goes is refused, never followed\n"
    "  --device NAME        host (default), or sim:<chip> (v4, v5e, v5p, v6e, v7): the\n"
    "                       host computes the values and the simulator times the\n"
    "                       kernel on that TPU: cycles, FLOP/s, % of peak, the bound\n"
    "  --trace FILE         with sim:<chip>: write the timeline as Chrome-trace JSON,\n"
    "                       one track per unit (open it in ui.perfetto.dev); written\n"
    "                       as the --out files are (FILE may not be a symbolic link)\n"
    "  --repeat N           timed calls for the steady state (default 10)\n"
    "\n"
    "Environment: TPK_TIER=tcc|cc|auto forces a compiler tier; TPK_HOST_VMEM sets the\n"
    "host's VMEM budget (default 128M, a TPU v5e's).\n"
    "\n"
    "Exit status: 0 ran (and checked) fine, 1 the kernel failed or did not match, 2 a\n"
    "wrong command line.\n"
    "\n"
    "Examples:\n"
    "  tpk run softmax.tpk --shape M=1024,N=512 --check\n"
    "  tpk run matmul.tpk --shape M=512,N=512,K=512 --tune BM=256 --repeat 20\n"
    "  tpk run layernorm.tpk --shape M=64,N=128 --scalar eps=1e-5 --out results\n"
    "  tpk run matmul.tpk --shape M=4096,N=4096,K=4096 --device sim:v5e --trace mm.json\n";

static const char BENCH_HELP[] =
    "Usage: tpk bench FILE [--kernel NAME] --shape LIST --device LIST [options]\n"
    "       tpk bench --suite std [--device LIST] [--json FILE] [--only NAMES]\n"
    "                 [--repeat N] [--smoke] [--list] [--kernels DIR] [--threads N]\n"
    "\n"
    "Time one kernel on several devices with the same inputs, one row per device:\n"
    "on the host, the measured steady-state time (after the optimized compile);\n"
    "on a simulated chip (sim:v5e, ...), the time it would take there, its matmul\n"
    "TFLOP/s, HBM GB/s, share of the chip's peak, and whether compute or memory\n"
    "bounds it.\n"
    "\n"
    "Options: --kernel, --shape, --scalar, --tune, --inputs, --seed and --repeat as\n"
    "for `tpk run`, and:\n"
    "  --device LIST        comma-separated devices (default: host)\n"
    "  --json               one JSON object per row, as bench/run.py reads them\n"
    "\n"
    "With --suite std, measure every kernel of the standard library at its\n"
    "documented shape (see --list) and print one table: host time and GFLOP/s or\n"
    "GB/s, the best CPU reference measured in the same run (OpenBLAS sgemm for\n"
    "matmul, PyTorch CPU eager through bench/torch_ref.py for the rest), the ratio\n"
    "reference time / tpk time (> 1: tpk is faster), and per simulated chip the\n"
    "time in µs and the share of the roofline and of the matmul peak reached. The\n"
    "references run on as many threads as tpk's host device (1). The suite's goals\n"
    "follow, one pass/fail line each.\n"
    "  --device LIST        devices to run (default: host,sim:v5e)\n"
    "  --json FILE          also write every figure to FILE as JSON\n"
    "  --only NAMES         only these kernels: --only softmax,layernorm\n"
    "  --repeat N           timed calls of tpk and of the reference each (default 10)\n"
    "  --smoke              tiny shapes, 2 calls: checks that the suite runs\n"
    "  --list               print the rows (kernel, file, shape, reference, goal)\n"
    "  --threads N          the host's threads for grids and for the references\n"
    "                       (default: $TPK_HOST_THREADS, else every core)\n"
    "  --kernels DIR        the .tpk files from DIR (else $TPK_KERNELS_DIR, else the\n"
    "                       standard library built into tpk, compiled ahead of time)\n"
    "$PYTHON (default python3) runs bench/torch_ref.py (found near the tpk binary, or\n"
    "$TPK_TORCH_REF); without PyTorch or OpenBLAS their columns say n/a. The exit\n"
    "status is 1 when a kernel is missing or fails; a missed goal does not change it.\n"
    "\n"
    "Examples:\n"
    "  tpk bench matmul.tpk --shape M=4096,N=4096,K=4096 --tune BM=1024,BN=1024 \\\n"
    "      --device host,sim:v5e,sim:v6e\n"
    "  tpk bench --suite std --json results.json\n"
    "  tpk bench --suite std --only softmax,layernorm --device host\n";

static const char TUNE_HELP[] =
    "Usage: tpk tune FILE [--kernel NAME] --shape LIST [--device NAME] [options]\n"
    "\n"
    "Find the fastest values of a kernel's tunables (`tune BM in [128, 256]`) for\n"
    "the sizes in --shape on one device, showing each configuration as it is timed,\n"
    "and remember the winner: later launches of the kernel with these sizes on this\n"
    "device use it.\n"
    "\n"
    "On a simulated chip (--device sim:v5e, ...) each configuration is checked,\n"
    "lowered and planned for the chip's VMEM and timed on the simulator's timeline,\n"
    "without generating or compiling code: milliseconds per configuration. On the\n"
    "host each configuration is compiled with cc -O3 (TPK_TIER=cc unless set) and\n"
    "run on seeded random inputs; its time is the median of --repeat launches.\n"
    "Configurations that do not fit in VMEM, or that the checker rejects, are\n"
    "skipped with the reason.\n"
    "\n"
    "Every combination of the declared values is timed, the defaults first, when\n"
    "there are at most --max-configs of them; a larger space is searched by\n"
    "coordinate descent from the defaults (sweep one tunable at a time, keep the\n"
    "fastest, repeat until nothing improves), timing at most --max-configs.\n"
    "\n"
    "Options:\n"
    "  --kernel, -k NAME    the kernel to tune (may be left out if FILE has one)\n"
    "  --shape LIST         sizes of every shape symbol: M=4096,N=4096,K=4096\n"
    "  --device NAME        host (default), or sim:<chip> (v4, v5e, v5p, v6e, v7)\n"
    "  --tune LIST          hold these tunables at one of their values and search the\n"
    "                       others: --tune BK=512\n"
    "  --max-configs N      search every combination up to N of them (default 512)\n"
    "  --scalar LIST        host: values of scalar parameters (default 1): eps=1e-5\n"
    "  --repeat N           host: timed launches per configuration (default 5)\n"
    "  --seed S             host: seed of the random inputs (default 0)\n"
    "  --no-cache           do not remember the winner\n"
    "  --save-default FILE  also add or update the winner's row in FILE, a table of\n"
    "                       shipped defaults such as kernels/tuned.tsv\n"
    "  --cached             do not search: show the configuration launches would use\n"
    "                       for these sizes (exit status 1 when none is known)\n"
    "  --defaults FILE      with --cached: also look in FILE (kernels/tuned.tsv)\n"
    "  -q, --quiet          only the summary, not a line per configuration\n"
    "\n"
    "The cache holds one small file per kernel, sizes and device in the tune/ folder\n"
    "of tpk's cache ($TPK_CACHE_DIR, else $XDG_CACHE_HOME/tpk, else ~/.cache/tpk;\n"
    "TPK_CACHE_DIR= disables it). Entries are keyed by a hash of the kernel's checked\n"
    "IR: after an edit to the kernel it is tuned afresh.\n"
    "\n"
    "Exit status: 0 a winner was found (with --cached: one is known), 1 FILE has\n"
    "errors, no configuration ran, or nothing is known, 2 a wrong command line\n"
    "(including a --kernel, --shape or --tune name that FILE does not define).\n"
    "\n"
    "Examples:\n"
    "  tpk tune matmul.tpk --shape M=4096,N=4096,K=4096 --device sim:v5e\n"
    "  tpk tune matmul.tpk --shape M=4096,N=4096,K=4096 --device sim:v5e --cached\n"
    "  tpk tune softmax.tpk --shape M=4096,N=1024 --device host --repeat 10\n"
    "  tpk tune matmul.tpk --shape M=8192,N=8192,K=8192 --device sim:v6e --tune BK=512 \\\n"
    "      --save-default kernels/tuned.tsv\n";

static const char REPLAY_HELP[] =
    "Usage: tpk replay FILE [--mode LIST] [--device NAME] [--steps N] [--sizes LIST]\n"
    "\n"
    "Run an op stream recorded from PyTorch (tools/record_streams.py writes them;\n"
    "bench/streams has a training step of an MLP and of a transformer block)\n"
    "through the eager runtime, as the `tpk` device would run it: every op is\n"
    "submitted one at a time, each value freed after its last use, and a step ends\n"
    "with a sync. For each mode it prints the kernels launched a step, the first\n"
    "step's time (what it compiled), the steady time a step and, on a simulated\n"
    "chip, the simulated time a step; then it checks that every mode's outputs\n"
    "match the first mode's (|a - b| <= 1e-4 + 1e-3 |a|).\n"
    "\n"
    "  --mode, -m LIST      debug, strict, fused, a comma-separated list, or all\n"
    "                       (default strict,fused)\n"
    "  --device, -d NAME    host (default) or sim:<chip>\n"
    "  --steps N            steps per mode (default 5)\n"
    "  --sizes LIST         other values for the stream's size symbols, s4=100,...\n"
    "                       (the file's `sizes` line has the recorded ones)\n"
    "  --quiet, -q          print only the comparison\n"
    "\n"
    "Exit status: 0 when every mode ran and agreed, 1 when an op failed or the\n"
    "modes disagree, 2 when the command line is wrong.\n"
    "\n"
    "Examples:\n"
    "  tpk replay bench/streams/mlp_train.ops --mode all\n"
    "  tpk replay bench/streams/block_train.ops --device sim:v5e --sizes s4=100\n";

static const char CACHE_HELP[] =
    "Usage: tpk cache stats|clear|path\n"
    "\n"
    "Show or empty the compilation cache: the shared objects the system cc built\n"
    "for kernels (TPK_TIER=auto once a kernel is hot, or TPK_TIER=cc), and what\n"
    "fusion made of compiled graphs and eager windows, and what a launch's sizes\n"
    "taught, kept so that later processes load them instead of building them.\n"
    "\n"
    "  stats   the folder, the key that authenticates its entries, how many entries\n"
    "          there are and their size against the limit, and the build folders\n"
    "          under way or left by processes that were killed\n"
    "  clear   remove every entry and every build folder whose process is gone\n"
    "          (safe while other processes use the cache; tuning results stay)\n"
    "  path    print the folder\n"
    "\n"
    "The folder is $TPK_CACHE_DIR, else $XDG_CACHE_HOME/tpk, else ~/.cache/tpk\n"
    "(TPK_CACHE_DIR= turns the cache off). It may be shared by users and hosts: an\n"
    "entry is loaded only when its HMAC-SHA256 under the cache key verifies, and one\n"
    "that does not is compiled again, never loaded. The key is $TPK_CACHE_KEY_FILE\n"
    "(a team's, for a shared cache), else your own, made on first use\n"
    "($XDG_CONFIG_HOME/tpk/cache.key, else ~/.config/tpk/cache.key). A key file\n"
    "must be 32 to 4096 bytes, yours or root's, writable by no one else, unreadable\n"
    "by others (its group may read it) and outside the cache folder; otherwise the\n"
    "cache is off, and kernels still compile. TPK_CACHE_MAX (default 1G; 512M, 2G,\n"
    "...) limits the entries' size: the least recently used go first.\n"
    "\n"
    "Exit status: 0 on success, 1 when the cache cannot be read or cleared (for\n"
    "`path`: when there is no folder), 2 when the command line is wrong.\n"
    "\n"
    "Examples:\n"
    "  tpk cache stats\n"
    "  tpk cache clear\n"
    "  du -sh \"$(tpk cache path)\"\n"
    "  TPK_CACHE_DIR=/shared/tpk TPK_CACHE_KEY_FILE=/etc/tpk/team.key tpk cache stats\n";

static const char HELP_HELP[] =
    "Usage: tpk help [COMMAND]\n"
    "\n"
    "Without COMMAND, describe tpk and list its commands; with COMMAND, show that\n"
    "command's usage, options and examples (the same as `tpk COMMAND --help`).\n"
    "\n"
    "Examples:\n"
    "  tpk help\n"
    "  tpk help check\n";

/* The commands, in the order `tpk --help` lists them. */
static const CliCommand COMMANDS[] = {
    {"check", "parse and check .tpk files; report every error", CHECK_HELP, cli_check},
    {"dump", "print the syntax tree, the IR or the generated C of a .tpk file", DUMP_HELP, cli_dump},
    {"run", "run a kernel on random or .npy inputs, check it and time it", RUN_HELP, cli_run},
    {"bench", "time a kernel on the host and on simulated TPUs, one row per device", BENCH_HELP, cli_bench},
    {"tune", "search a kernel's tunables on a simulated TPU or the host; remember the winner", TUNE_HELP, cli_tune},
    {"cache", "show or empty the compilation cache: stats, clear, path", CACHE_HELP, cli_cache},
    {"replay", "run a recorded PyTorch op stream in the eager modes, timed and compared", REPLAY_HELP, cli_replay},
    {"help", "show help for tpk or for one command", HELP_HELP, cli_help},
};
enum { NCOMMANDS = (int)TPK_ARRAY_LEN(COMMANDS) };

static void print_main_help(FILE *f) {
  fputs(MAIN_HELP_HEAD, f);
  for (int i = 0; i < NCOMMANDS; i++) fprintf(f, "  %-7s %s\n", COMMANDS[i].name, COMMANDS[i].summary);
  fputs(MAIN_HELP_TAIL, f);
}

static const CliCommand *find_command(const char *name) {
  for (int i = 0; i < NCOMMANDS; i++)
    if (strcmp(COMMANDS[i].name, name) == 0) return &COMMANDS[i];
  return NULL;
}

static int unknown_command(const char *name) {
  const char *names[NCOMMANDS];
  for (int i = 0; i < NCOMMANDS; i++) names[i] = COMMANDS[i].name;
  const char *s = tpk_suggest(name, names, NCOMMANDS);
  fflush(stdout);
  if (s)
    fprintf(stderr, "tpk: unknown command '%s'; did you mean '%s'?\n", name, s);
  else
    fprintf(stderr, "tpk: unknown command '%s'\n", name);
  fprintf(stderr, "Run 'tpk --help' for the list of commands.\n");
  return CLI_USAGE;
}

static int cli_help(const CliCommand *cmd, int argc, char **argv) {
  (void)cmd;
  if (argc > 2) return cli_usage_error("help", "expects at most one command name");
  if (argc < 2) {
    print_main_help(stdout);
    return CLI_OK;
  }
  if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
    fputs(HELP_HELP, stdout);
    return CLI_OK;
  }
  const CliCommand *c = find_command(argv[1]);
  if (!c) return unknown_command(argv[1]);
  fputs(c->help, stdout);
  return CLI_OK;
}

/* `tpk CMD --help` anywhere before a `--`: answered here so every command
 * gets it the same way, whatever else is on the line. */
static bool wants_help(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0) return false;
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) return true;
  }
  return false;
}

int main(int argc, char **argv) {
  /* A closed pipe (`tpk dump --ir x.tpk | head`) must not kill us with
   * SIGPIPE: writes fail instead, and cli_finish_output handles that. */
  signal(SIGPIPE, SIG_IGN);

  if (argc < 2) {
    fprintf(stderr, "Usage: tpk COMMAND [OPTIONS] [FILE...]\n\nCommands:\n");
    for (int i = 0; i < NCOMMANDS; i++) fprintf(stderr, "  %-7s %s\n", COMMANDS[i].name, COMMANDS[i].summary);
    fprintf(stderr, "\nRun 'tpk --help' for a description of tpk and examples.\n");
    return CLI_USAGE;
  }
  const char *first = argv[1];
  if (strcmp(first, "-h") == 0 || strcmp(first, "--help") == 0) {
    print_main_help(stdout);
    return cli_finish_output(CLI_OK);
  }
  if (strcmp(first, "--version") == 0) {
    printf("tpk %s\n", TPK_VERSION);
    return cli_finish_output(CLI_OK);
  }
  if (first[0] == '-') {
    fprintf(stderr, "tpk: unknown option '%s'; a command comes first (tpk COMMAND [OPTIONS])\n", first);
    fprintf(stderr, "Run 'tpk --help' for the list of commands.\n");
    return CLI_USAGE;
  }
  const CliCommand *cmd = find_command(first);
  if (!cmd) return unknown_command(first);
  if (cmd->run != cli_help && wants_help(argc - 1, argv + 1)) {
    fputs(cmd->help, stdout);
    return cli_finish_output(CLI_OK);
  }
  int status = cmd->run(cmd, argc - 1, argv + 1);
  return cli_finish_output(status);
}
