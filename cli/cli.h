/*
 * cli.h — the pieces the `tpk` command's files share: the command table
 * entry, a small option parser, NAME=INTEGER lists, "did you mean"
 * suggestions and output that survives a closed pipe.
 *
 * Conventions every command follows:
 *   - messages go to stderr as `tpk: ...` (or `tpk CMD: ...` for usage);
 *   - exit status 0 = success, 1 = the input has errors or cannot be read,
 *     2 = the command line is wrong (CLI_USAGE);
 *   - nothing calls exit(): handlers return their status to main().
 */
#ifndef TPK_CLI_H
#define TPK_CLI_H

#include <stdbool.h>

#include "dsl/dsl.h"

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* One `tpk` command: main() dispatches through a table of these. */
typedef struct CliCommand {
  const char *name;
  const char *summary; /* one line for `tpk --help` */
  const char *help;    /* the full text for `tpk help NAME` / `tpk NAME --help` */
  int (*run)(const struct CliCommand *cmd, int argc, char **argv); /* argv[0] is the command name */
} CliCommand;

int cli_check(const CliCommand *cmd, int argc, char **argv);
int cli_dump(const CliCommand *cmd, int argc, char **argv);
int cli_run(const CliCommand *cmd, int argc, char **argv);
int cli_bench(const CliCommand *cmd, int argc, char **argv);
int cli_tune(const CliCommand *cmd, int argc, char **argv);
int cli_cache(const CliCommand *cmd, int argc, char **argv);
int cli_replay(const CliCommand *cmd, int argc, char **argv);
/* `tpk bench --suite NAME` (cli/bench_suite.c): cli_bench hands the command
 * line over when cli_bench_wants_suite sees --suite before any `--`. */
bool cli_bench_wants_suite(int argc, char **argv);
int cli_bench_suite(const CliCommand *cmd, int argc, char **argv);

/* ---- Options -----------------------------------------------------------------
 * Long options `--name`, `--name=value`, `--name value`; short `-q`; `--` ends
 * options; `-` alone is a positional (standard input). Options and positionals
 * may be mixed in any order. */
typedef struct CliOption {
  const char *name; /* long name without the dashes */
  char short_name;  /* 0 when there is none */
  bool takes_value;
  int id; /* returned by cli_next_arg, > 0 */
} CliOption;

enum { CLI_ARG_END = 0, CLI_ARG_POSITIONAL = -1, CLI_ARG_ERROR = -2 };

typedef struct CliArgs {
  const char *cmd; /* for messages: "check" */
  int argc;
  char **argv;
  int i;           /* next argument to look at */
  bool no_more_options;
  const CliOption *opts;
  int nopts;
} CliArgs;

void cli_args_init(CliArgs *a, const char *cmd, int argc, char **argv, const CliOption *opts, int nopts);
/* The next option's id (its value in *value when it takes one), a
 * positional (CLI_ARG_POSITIONAL, the word in *value), CLI_ARG_END, or
 * CLI_ARG_ERROR after printing why (the caller returns CLI_USAGE). */
int cli_next_arg(CliArgs *a, const char **value);

/* Print `tpk CMD: message` and the pointer to the command's help; returns
 * CLI_USAGE so callers write `return cli_usage_error(...)`. */
int cli_usage_error(const char *cmd, const char *fmt, ...) TPK_PRINTF(2, 3);

/* ---- NAME=INTEGER lists (--bind, --tune) ---------------------------------------- */
typedef struct CliBindings {
  TpkBinding *items; /* names are heap copies */
  int count, cap;
} CliBindings;

/* Parse "M=1024,N=512" and append to b. On a malformed list prints
 * `tpk: --OPTION expects NAME=INTEGER[,NAME=INTEGER...], got 'ITEM'` and
 * returns false. A name given twice (across repeated options too) is an
 * error. */
bool cli_bindings_parse(CliBindings *b, const char *option, const char *text);
void cli_bindings_free(CliBindings *b);

/* ---- NAME=VALUE lists (--scalar, --inputs) --------------------------------------- */
typedef struct CliPair {
  char *name, *text; /* heap copies */
} CliPair;
typedef struct CliPairs {
  CliPair *items;
  int count, cap;
} CliPairs;

/* Parse "eps=1e-5,x=a.npy" and append to p. A malformed item (no '=', an
 * empty name or value, an empty item) prints `tpk: --OPTION expects
 * NAME=VALUE[,NAME=VALUE...], got 'ITEM'`; a name given twice (across
 * repeated options too) is an error; both return false. */
bool cli_pairs_parse(CliPairs *p, const char *option, const char *text);
/* The value given for name, or NULL. */
const char *cli_pairs_find(const CliPairs *p, const char *name);
void cli_pairs_free(CliPairs *p);

/* A seed: decimal digits only (no sign, no spaces) that fit in 64 bits. */
bool cli_parse_seed(const char *text, uint64_t *out);

/* ---- Output --------------------------------------------------------------------- */
/* Write s to stdout (stderr) and flush, so stdout and stderr interleave in
 * order when both go to one pipe. Write errors are noticed at exit by
 * cli_finish_output. */
void cli_out(const char *s, size_t len);
void cli_err(const char *s, size_t len);
/* Flush stdout; when it failed (full disk, closed pipe) say so unless it
 * was a closed pipe, and turn a successful status into CLI_FAIL. */
int cli_finish_output(int status);
/* A context's log (tpk_context_set_log: TPK_DUMP_IR=1's dumps) on stderr. */
void cli_log(void *user, const char *text);

/* Read a .tpk file, or standard input for "-" (named "<stdin>"). */
TpkStatus cli_source_read(TpkSource *src, const char *path, TpkError *err);

/* A library error on stderr: "PREFIX: message", except that diagnostics
 * arrive rendered (file:line:col: error: ..., with the line) and print as
 * they are; one newline at the end. */
void cli_print_error(const char *prefix, const char *msg);

#endif
