/*
 * check.c — `tpk check FILE...`: parse and check each file, print its
 * diagnostics to stderr and `FILE: ok (N kernels)` for each clean one.
 *
 * A clean file is one whose IR was built and verifies: a module that fails
 * tpk_ir_verify is a bug in tpk, reported as such rather than as "ok".
 */
#include "cli/cli.h"

#include <stdio.h>

enum { OPT_QUIET = 1 };

static const CliOption OPTIONS[] = {
    {"quiet", 'q', false, OPT_QUIET},
};

static int count_kernels(const TpkModule *m) {
  int n = 0;
  for (int i = 0; i < m->nfuncs; i++) n += m->funcs[i]->is_kernel;
  return n;
}

static int check_file(const char *path, bool quiet) {
  TpkSource src;
  TpkError err = {0};
  if (cli_source_read(&src, path, &err) != TPK_OK) {
    fflush(stdout);
    fprintf(stderr, "tpk: %s\n", err.message);
    return CLI_FAIL;
  }
  TpkDiags diags;
  tpk_diags_init(&diags, &src);
  TpkModule *m = NULL;
  TpkCheckOptions opts = {0};
  TpkStatus st = tpk_compile_source(&src, &opts, &diags, &m);

  TpkStr rendered = {0};
  tpk_diags_render(&rendered, &diags);
  cli_err(rendered.data, rendered.len);
  tpk_str_free(&rendered);

  int status = CLI_OK;
  if (st != TPK_OK || !m || diags.errors > 0) {
    status = CLI_FAIL;
    if (diags.errors == 0) /* never leave a failure unexplained */
      fprintf(stderr, "tpk: internal error: %s did not compile (%s) but no error was reported\n", src.name,
              tpk_status_name(st));
  } else if (tpk_ir_verify(m, &err) != TPK_OK) {
    status = CLI_FAIL;
    fprintf(stderr, "tpk: internal error: the IR built for %s does not verify: %s\n", src.name, err.message);
  } else if (!quiet) {
    int n = count_kernels(m);
    printf("%s: ok (%d kernel%s)\n", src.name, n, n == 1 ? "" : "s");
    fflush(stdout);
  }
  if (m) tpk_module_free(m);
  tpk_diags_free(&diags);
  tpk_source_free(&src);
  return status;
}

int cli_check(const CliCommand *cmd, int argc, char **argv) {
  CliArgs args;
  cli_args_init(&args, cmd->name, argc, argv, OPTIONS, (int)TPK_ARRAY_LEN(OPTIONS));
  bool quiet = false;
  int nfiles = 0;
  const char *value;
  int id;
  /* Options first (they may follow the files), then the files in order. */
  while ((id = cli_next_arg(&args, &value)) != CLI_ARG_END) {
    if (id == CLI_ARG_ERROR) return CLI_USAGE;
    if (id == OPT_QUIET) quiet = true;
    if (id == CLI_ARG_POSITIONAL) nfiles++;
  }
  if (nfiles == 0) return cli_usage_error(cmd->name, "no input files (usage: tpk check [-q] FILE...)");

  int status = CLI_OK;
  cli_args_init(&args, cmd->name, argc, argv, OPTIONS, (int)TPK_ARRAY_LEN(OPTIONS));
  while ((id = cli_next_arg(&args, &value)) != CLI_ARG_END)
    if (id == CLI_ARG_POSITIONAL && check_file(value, quiet) != CLI_OK) status = CLI_FAIL;
  return status;
}
