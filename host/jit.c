/*
 * jit.c — generated C to callable kernels: libtcc in memory now, the system
 * cc at -O3 in a background thread later, and a disk cache of what cc built.
 *
 * One kernel in the auto tier:
 *
 *   tpk_jit_compile ─► disk cache hit? ─► dlopen: done, tier cc
 *                   └► libtcc in memory: tier tcc ─► after hot_calls calls
 *                      tpk_code_entry queues it; the worker thread runs cc,
 *                      stores the .so in the cache, dlopens it and swaps the
 *                      entry point atomically.
 *
 * Global state: libtcc 0.9.27 keeps compiler state in globals (tcc_state,
 * the preprocessor's tables), so every libtcc call of the process holds one
 * static mutex, tcc_lock; three stand-ins for libc variables serve the copy
 * of libtcc inside libtpk.so (below). Nothing else here is global.
 *
 * Code compiled by tcc is relocated into memory this file owns, so the
 * TCCState (a few hundred KB of tables) is freed right after each compile.
 *
 * Cache files are <dir>/<sha256 of key>.so. The key covers a format tag, the
 * cc command and its flags, the compiler binary's identity (path, size,
 * mtime), the text of tpk_prims.h and the source. SHA-256 rather than a fast
 * 64- or 128-bit hash: a collision would silently run another kernel's code,
 * the cost (microseconds) is nothing next to cc, and the same function
 * checks the file's integrity. A file is loaded only when it is a regular
 * file owned by this user, not writable by group or others, in a directory
 * with the same properties, and ends with a trailer holding the SHA-256 of
 * the rest of the file (ELF loaders ignore trailing bytes). dlopen does not
 * validate a file and may crash on a truncated one, so a damaged file fails
 * the trailer check first and is removed and rebuilt.
 */
#include "host/jit.h"
#include "base/files.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <libtcc.h>

extern char **environ;               /* POSIX: applications declare it */
extern const char tpk_jit_prims_h[]; /* host/prims.h, embedded by the Makefile */

/* Where tcc finds its include/ folder and libtcc1.a; the Makefile passes the
 * folder it found at build time, and tcc_lib_dir() probes these otherwise. */
#ifndef TPK_TCC_LIB_PATH
#define TPK_TCC_LIB_PATH "/usr/lib/x86_64-linux-gnu/tcc"
#endif
static const char *const tcc_lib_candidates[] = {
    TPK_TCC_LIB_PATH,       "/usr/lib/x86_64-linux-gnu/tcc", "/usr/lib/aarch64-linux-gnu/tcc",
    "/usr/local/lib/tcc",   "/usr/lib/tcc",                  "/usr/lib64/tcc",
};

enum {
  DEFAULT_HOT_CALLS = 3,
  MAX_HOT_CALLS = 1 << 30,           /* keeps the call counter from overflowing */
  MAX_CACHE_FILE = 256 << 20,        /* larger cache files are not read */
  MAX_LOG = 16 << 10,                /* bytes of cc output kept for a message */
};

/* The trailer appended to every cache file. */
static const char trailer_magic[8] = {'T', 'P', 'K', 'J', 'I', 'T', '0', '1'};
enum { TRAILER_LEN = 8 + 32 };

/* ---- SHA-256 (FIPS 180-4) ------------------------------------------------ */

typedef struct Sha256 {
  uint32_t h[8];
  uint64_t len; /* bytes absorbed */
  unsigned char buf[64];
  size_t fill;
} Sha256;

static const uint32_t sha_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t ror32(uint32_t x, unsigned n) { return (x >> n) | (x << (32 - n)); }

static void sha_block(Sha256 *s, const unsigned char *p) {
  uint32_t w[64];
  for (int i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = ror32(w[i - 15], 7) ^ ror32(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = ror32(w[i - 2], 17) ^ ror32(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3], e = s->h[4], f = s->h[5], g = s->h[6], h = s->h[7];
  for (int i = 0; i < 64; i++) {
    uint32_t t1 = h + (ror32(e, 6) ^ ror32(e, 11) ^ ror32(e, 25)) + ((e & f) ^ (~e & g)) + sha_k[i] + w[i];
    uint32_t t2 = (ror32(a, 2) ^ ror32(a, 13) ^ ror32(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
  }
  s->h[0] += a, s->h[1] += b, s->h[2] += c, s->h[3] += d;
  s->h[4] += e, s->h[5] += f, s->h[6] += g, s->h[7] += h;
}

static void sha_init(Sha256 *s) {
  static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(s->h, iv, sizeof iv);
  s->len = 0;
  s->fill = 0;
}

static void sha_update(Sha256 *s, const void *data, size_t n) {
  const unsigned char *p = data;
  s->len += n;
  if (s->fill) {
    size_t take = 64 - s->fill < n ? 64 - s->fill : n;
    memcpy(s->buf + s->fill, p, take);
    s->fill += take, p += take, n -= take;
    if (s->fill < 64) return;
    sha_block(s, s->buf);
    s->fill = 0;
  }
  for (; n >= 64; p += 64, n -= 64) sha_block(s, p);
  memcpy(s->buf, p, n);
  s->fill = n;
}

static void sha_final(Sha256 *s, unsigned char out[32]) {
  uint64_t bits = s->len * 8;
  unsigned char pad[72] = {0x80};
  size_t npad = (s->fill < 56 ? 56 : 120) - s->fill;
  for (int i = 0; i < 8; i++) pad[npad + (size_t)i] = (unsigned char)(bits >> (56 - 8 * i));
  sha_update(s, pad, npad + 8);
  for (int i = 0; i < 32; i++) out[i] = (unsigned char)(s->h[i / 4] >> (24 - 8 * (i % 4)));
}

static void sha_puts(Sha256 *s, const char *text) { sha_update(s, text, strlen(text) + 1); /* with the NUL */ }

/* ---- Types ------------------------------------------------------------------ */

enum { PROMO_NONE, PROMO_PENDING, PROMO_DONE }; /* TpkCode.promo */

struct TpkCode {
  TpkJit *jit;
  _Atomic(TpkKernelFn) fn; /* what tpk_code_entry hands out */
  atomic_int tier;         /* TpkTier of fn */
  atomic_int calls;        /* counted until the promotion is queued */
  atomic_int promo;        /* PROMO_*: set under jit->mu, read without it */
  char *source, *entry;    /* kept while a promotion may need them */
  char key[65];            /* cache file name stem (hex), "" when unused */
  void *tcc_mem;           /* code relocated by tcc (page aligned), or NULL */
  size_t tcc_len;
  void *dl;                /* dlopen handle of the cc build, or NULL */
  char *cc_error;          /* message of a failed background cc, or NULL */
  TpkCode *next;           /* all codes of the jit */
  TpkCode *qnext;          /* the worker's queue */
};

struct TpkJit {
  TpkTier tier;
  int hot_calls;
  char *cache_dir;  /* NULL: no disk cache (disabled, or not private) */
  char *tmp_root;   /* parent of build folders when there is no cache */
  char *tcc_lib;    /* tcc's folder (include/, libtcc1.a) */
  char **cc_argv;   /* compiler words and flags, NULL-terminated */
  char *cc_command; /* the same, space-separated, for messages */
  Sha256 key_base;  /* the cache key with everything but the source */

  pthread_mutex_t mu; /* guards everything below */
  pthread_cond_t work_cv, done_cv;
  TpkCode *codes, *qhead, *qtail;
  bool worker_started, shutdown;
  pthread_t worker;
  pid_t child; /* cc process the worker waits on, 0 if none */

  atomic_int n_tcc, n_cc, n_hits, n_cc_fail;
};

/* The one lock libtcc forces on the process (see the top of the file). */
static pthread_mutex_t tcc_lock = PTHREAD_MUTEX_INITIALIZER;

/* libtpk.so links a copy of libtcc whose uses of libc's stdout, stderr and
 * environ were renamed to these (see the Makefile); tcc_build sets them
 * under tcc_lock before each use of libtcc. Programs linking libtpk.a use
 * the system libtcc and never read them. */
#if defined(__GNUC__)
#define TPK_HIDDEN __attribute__((visibility("hidden")))
#else
#define TPK_HIDDEN
#endif
TPK_HIDDEN FILE *tpk_tcc_stdout, *tpk_tcc_stderr;
TPK_HIDDEN char **tpk_tcc_environ;

/* ---- Small helpers ------------------------------------------------------- */

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

static bool is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static bool write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  bool ok = tpk_write_all(fd, text, strlen(text));
  return close(fd) == 0 && ok;
}

/* Up to `max` bytes of a file, NUL-terminated (heap), or NULL. */
static char *read_text(const char *path, size_t max) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  char *buf = malloc(max + 1);
  size_t n = 0;
  while (buf && n < max) {
    ssize_t r = read(fd, buf + n, max - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += (size_t)r;
  }
  close(fd);
  if (buf) buf[n] = 0;
  return buf;
}

static bool read_all(int fd, unsigned char *buf, size_t n) {
  while (n) {
    ssize_t r = read(fd, buf, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    buf += r, n -= (size_t)r;
  }
  return true;
}

static TpkKernelFn as_kernel(void *sym) {
  TpkKernelFn fn; /* object to function pointer: POSIX guarantees it works for dlsym */
  memcpy(&fn, &sym, sizeof fn);
  return fn;
}

static size_t page_size(void) {
  long p = sysconf(_SC_PAGESIZE);
  return p > 4096 ? (size_t)p : 4096; /* tcc aligns sections to its own 4096 */
}

/* ---- Options ------------------------------------------------------------- */

TpkStatus tpk_jit_options_from_env(TpkJitOptions *o, TpkError *err) {
  *o = (TpkJitOptions){.tier = TPK_TIER_AUTO, .hot_calls = -1};
  o->cache_dir = getenv("TPK_CACHE_DIR"); /* "" disables the cache, as in the options */
  const char *cc = getenv("CC");
  o->cc = cc && *cc ? cc : NULL;
  const char *t = getenv("TPK_TIER");
  if (t && strcmp(t, "tcc") == 0) o->tier = TPK_TIER_TCC;
  else if (t && strcmp(t, "cc") == 0) o->tier = TPK_TIER_CC;
  else if (t && *t && strcmp(t, "auto") != 0)
    return tpk_error(err, TPK_ERR_INVALID, "TPK_TIER=%s: expected tcc, cc or auto", t);
  const char *h = getenv("TPK_JIT_HOT_CALLS");
  if (h && *h) {
    char *end;
    long v = strtol(h, &end, 10);
    if (*end || v < 0)
      return tpk_error(err, TPK_ERR_INVALID, "TPK_JIT_HOT_CALLS=%s: expected a count of calls (0 or more)", h);
    o->hot_calls = v > MAX_HOT_CALLS ? MAX_HOT_CALLS : (int)v;
  }
  return TPK_OK;
}

static const char *tcc_lib_dir(void) {
  for (size_t i = 0; i < TPK_ARRAY_LEN(tcc_lib_candidates); i++) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/libtcc1.a", tcc_lib_candidates[i]);
    if (is_file(path)) return tcc_lib_candidates[i];
  }
  return TPK_TCC_LIB_PATH; /* tcc will then say what it misses */
}

/* Adds to the key what identifies the compiler binary: a compiler upgrade
 * changes its size or mtime and so misses the cache. (With a wrapper such as
 * ccache, only the wrapper is identified.) */
static void hash_compiler_identity(Sha256 *key, const char *prog) {
  char path[PATH_MAX] = "";
  struct stat st;
  bool found = false;
  if (strchr(prog, '/')) {
    snprintf(path, sizeof path, "%s", prog);
    found = stat(path, &st) == 0;
  } else {
    const char *dirs = getenv("PATH");
    for (const char *d = dirs ? dirs : "/usr/bin:/bin"; !found && *d;) {
      size_t n = strcspn(d, ":");
      snprintf(path, sizeof path, "%.*s/%s", (int)n, n ? d : ".", prog);
      found = stat(path, &st) == 0 && S_ISREG(st.st_mode);
      d += n + (d[n] == ':');
    }
  }
  char id[PATH_MAX + 96];
  if (found)
    snprintf(id, sizeof id, "compiler %s %lld %lld.%09ld", path, (long long)st.st_size, (long long)st.st_mtim.tv_sec,
             st.st_mtim.tv_nsec);
  else
    snprintf(id, sizeof id, "compiler %s not found", prog);
  sha_puts(key, id);
}

/* The compiler words ($CC may be "ccache gcc"), then our flags. -mavx2
 * -mfma only when this CPU has them (never -march=native: a shared cache
 * must stay loadable on other machines; the flags are part of the key).
 * -ffp-contract=off keeps cc from fusing a*b+c, which tcc never does, so
 * both tiers compute the same bits; -lm for scalar math in kernels. */
static bool build_cc_argv(TpkJit *j, const char *cc) {
  static const char *const flags[] = {"-O3", "-fPIC", "-shared", "-ffp-contract=off"};
  bool avx2 = false;
#if defined(__x86_64__) && defined(__GNUC__)
  avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  size_t nwords = 0;
  for (const char *s = cc; *s;) {
    s += strspn(s, " \t");
    if (!*s) break;
    nwords++;
    s += strcspn(s, " \t");
  }
  if (nwords == 0) return false;
  size_t n = nwords + TPK_ARRAY_LEN(flags) + 2 + 1;
  j->cc_argv = calloc(n + 1, sizeof *j->cc_argv);
  if (!j->cc_argv) return false;
  size_t k = 0;
  for (const char *s = cc; *s;) {
    s += strspn(s, " \t");
    if (!*s) break;
    size_t len = strcspn(s, " \t");
    j->cc_argv[k] = malloc(len + 1);
    if (!j->cc_argv[k]) return false;
    memcpy(j->cc_argv[k], s, len);
    j->cc_argv[k++][len] = 0;
    s += len;
  }
  for (size_t i = 0; i < TPK_ARRAY_LEN(flags); i++)
    if (!(j->cc_argv[k++] = dup_str(flags[i]))) return false;
  if (avx2 && (!(j->cc_argv[k++] = dup_str("-mavx2")) || !(j->cc_argv[k++] = dup_str("-mfma")))) return false;
  TpkStr cmd = {0};
  for (size_t i = 0; j->cc_argv[i]; i++) tpk_str_printf(&cmd, "%s%s", i ? " " : "", j->cc_argv[i]);
  j->cc_command = tpk_str_take(&cmd);
  if (cmd.failed) return false;

  sha_init(&j->key_base);
  sha_puts(&j->key_base, "tpk jit cache v1");
  for (size_t i = 0; j->cc_argv[i]; i++) sha_puts(&j->key_base, j->cc_argv[i]);
  hash_compiler_identity(&j->key_base, j->cc_argv[0]);
  sha_puts(&j->key_base, tpk_jit_prims_h);
  return true;
}

static void cache_key(const TpkJit *j, const char *source, char hex[65]) {
  Sha256 s = j->key_base;
  unsigned char d[32];
  sha_puts(&s, source);
  sha_final(&s, d);
  for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

TpkStatus tpk_jit_create(const TpkJitOptions *o, TpkJit **out, TpkError *err) {
  *out = NULL;
  TpkJitOptions def;
  if (!o) {
    TpkStatus st = tpk_jit_options_from_env(&def, err);
    if (st != TPK_OK) return st;
    o = &def;
  }
  if (o->tier != TPK_TIER_AUTO && o->tier != TPK_TIER_TCC && o->tier != TPK_TIER_CC)
    return tpk_error(err, TPK_ERR_INVALID, "unknown JIT tier %d", (int)o->tier);
  TpkJit *j = calloc(1, sizeof *j);
  if (!j) return tpk_error(err, TPK_ERR_NOMEM, "out of memory creating the JIT");
  j->tier = o->tier;
  j->hot_calls = o->hot_calls < 0 ? DEFAULT_HOT_CALLS : o->hot_calls > MAX_HOT_CALLS ? MAX_HOT_CALLS : o->hot_calls;
  const char *cc = o->cc ? o->cc : getenv("CC");
  const char *tmp = getenv("TMPDIR");
  j->tmp_root = dup_str(tmp && tmp[0] == '/' ? tmp : "/tmp");
  j->tcc_lib = dup_str(tcc_lib_dir());
  bool ok = j->tmp_root && j->tcc_lib && build_cc_argv(j, cc && *cc ? cc : "cc");
  if (ok && j->tier != TPK_TIER_TCC) {
    /* An unusable cache folder is not an error: kernels still compile. */
    char *dir = o->cache_dir ? (*o->cache_dir ? dup_str(o->cache_dir) : NULL) : tpk_cache_root();
    if (dir && tpk_make_dirs(dir) && tpk_dir_is_private(dir)) j->cache_dir = dir;
    else free(dir);
  }
  if (!ok || pthread_mutex_init(&j->mu, NULL) != 0) goto fail;
  if (pthread_cond_init(&j->work_cv, NULL) != 0) {
    pthread_mutex_destroy(&j->mu);
    goto fail;
  }
  if (pthread_cond_init(&j->done_cv, NULL) != 0) {
    pthread_cond_destroy(&j->work_cv);
    pthread_mutex_destroy(&j->mu);
    goto fail;
  }
  *out = j;
  return TPK_OK;
fail:
  for (size_t i = 0; j->cc_argv && j->cc_argv[i]; i++) free(j->cc_argv[i]);
  free(j->cc_argv);
  free(j->cc_command);
  free(j->cache_dir);
  free(j->tmp_root);
  free(j->tcc_lib);
  free(j);
  return tpk_error(err, TPK_ERR_NOMEM, "out of memory creating the JIT");
}

/* ---- tcc tier -------------------------------------------------------------- */

/* libtcc has no virtual files: the header's text replaces the include line,
 * and #line directives keep tcc's messages pointing at kernel.c lines. */
static char *splice_prims_header(const char *source) {
  static const char inc[] = "#include \"tpk_prims.h\"";
  const char *line = source;
  int lineno = 1;
  while (*line) {
    const char *s = line + strspn(line, " \t");
    if (strncmp(s, inc, sizeof inc - 1) == 0) break;
    const char *nl = strchr(line, '\n');
    if (!nl) {
      line += strlen(line);
      break;
    }
    line = nl + 1;
    lineno++;
  }
  TpkStr t = {0};
  tpk_str_puts(&t, "#line 1 \"kernel.c\"\n");
  if (!*line) {
    tpk_str_puts(&t, source);
  } else {
    tpk_str_putn(&t, source, (size_t)(line - source));
    const char *nl = strchr(line, '\n');
    tpk_str_printf(&t, "#line 1 \"tpk_prims.h\"\n%s\n#line %d \"kernel.c\"\n", tpk_jit_prims_h, lineno + 1);
    if (nl) tpk_str_puts(&t, nl + 1);
  }
  if (t.failed) {
    tpk_str_free(&t);
    return NULL;
  }
  return tpk_str_take(&t);
}

static void on_tcc_message(void *opaque, const char *msg) {
  TpkStr *log = opaque;
  tpk_str_printf(log, "%s%s", log->len ? "\n" : "", msg);
}

static void free_tcc_mem(void *mem, size_t len) {
  if (!mem) return;
  mprotect(mem, len, PROT_READ | PROT_WRITE); /* tcc made parts read-only or executable */
  free(mem);
}

static TpkStatus tcc_build(TpkJit *j, TpkCode *c, TpkError *err) {
  char *text = splice_prims_header(c->source);
  if (!text) return tpk_error(err, TPK_ERR_NOMEM, "out of memory compiling kernel '%s'", c->entry);
  TpkStr log = {0};
  void *mem = NULL, *sym = NULL;
  size_t len = 0;
  const char *failed = NULL;

  pthread_mutex_lock(&tcc_lock);
  tpk_tcc_stdout = stdout, tpk_tcc_stderr = stderr, tpk_tcc_environ = environ;
  atomic_fetch_add(&j->n_tcc, 1);
  TCCState *s = tcc_new();
  if (!s) {
    failed = "tcc_new failed";
  } else {
    tcc_set_error_func(s, &log, on_tcc_message);
    tcc_set_lib_path(s, j->tcc_lib); /* before the output type, which adds the include paths */
    tcc_set_output_type(s, TCC_OUTPUT_MEMORY);
    int size;
    if (tcc_compile_string(s, text) < 0) failed = "compile";
    else if ((size = tcc_relocate(s, NULL)) < 0) failed = "link";
    else {
      size_t page = page_size();
      len = ((size_t)size + page - 1) / page * page;
      if (posix_memalign(&mem, page, len ? len : page) != 0) {
        mem = NULL;
        failed = "out of memory";
      } else if (tcc_relocate(s, mem) < 0) {
        failed = "link";
      } else if (!(sym = tcc_get_symbol(s, c->entry))) {
        failed = "entry";
      }
    }
    tcc_delete(s);
  }
  pthread_mutex_unlock(&tcc_lock);
  free(text);

  TpkStatus st = TPK_OK;
  if (failed && strcmp(failed, "entry") == 0)
    st = tpk_error(err, TPK_ERR_INTERNAL, "tcc: kernel source defines no function '%s'", c->entry);
  else if (failed)
    st = tpk_error(err, TPK_ERR_INTERNAL, "tcc could not compile kernel '%s' (%s):\n%s", c->entry, failed,
                   log.data ? log.data : "(no message)");
  tpk_str_free(&log);
  if (st != TPK_OK) {
    free_tcc_mem(mem, len);
    return st;
  }
  c->tcc_mem = mem;
  c->tcc_len = len;
  atomic_store(&c->fn, as_kernel(sym));
  atomic_store(&c->tier, TPK_TIER_TCC);
  return TPK_OK;
}

/* ---- Disk cache ------------------------------------------------------------ */

/* Removes `path` if it is still the file `st` describes (another process may
 * have renamed a good build over it meanwhile). */
static void remove_if_same(const char *path, const struct stat *st) {
  struct stat now;
  if (lstat(path, &now) == 0 && now.st_dev == st->st_dev && now.st_ino == st->st_ino) unlink(path);
}

/* Loads cache file `key` and finds `entry` in it. Returns false on a miss;
 * a damaged file is removed, a file this user does not own or others can
 * write is left alone and never loaded (a rebuild renames over it). */
static bool cache_load(TpkJit *j, const char *key, const char *entry, void **handle, TpkKernelFn *fn) {
  char name[80];
  snprintf(name, sizeof name, "%s.so", key);
  char *path = tpk_path_join(j->cache_dir, name);
  if (!path) return false;
  bool ok = false;
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st;
  if (fd < 0) {
    if (errno == ELOOP) unlink(path); /* a symlink is never ours */
    free(path);
    return false;
  }
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)))
    goto done;
  bool damaged = st.st_size < TRAILER_LEN || st.st_size > MAX_CACHE_FILE;
  unsigned char *buf = damaged ? NULL : malloc((size_t)st.st_size);
  if (buf && read_all(fd, buf, (size_t)st.st_size)) {
    size_t body = (size_t)st.st_size - TRAILER_LEN;
    Sha256 s;
    unsigned char d[32];
    sha_init(&s);
    sha_update(&s, buf, body);
    sha_final(&s, d);
    damaged = memcmp(buf + body, trailer_magic, 8) != 0 || memcmp(buf + body + 8, d, 32) != 0;
  } else {
    damaged = true;
  }
  free(buf);
  if (!damaged) {
    /* Load what was checked: the descriptor, not the name, when /proc allows.
     * dlopen hands back an already loaded object whose name matches, and
     * an earlier build loaded through a descriptor of the same number
     * (closed since) has that name: use a number whose name is free. */
    char fdpath[64];
    int alt = -1;
    bool by_fd = true;
    snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", fd);
    for (int tries = 0; by_fd; tries++) {
      void *taken = dlopen(fdpath, RTLD_LOCAL | RTLD_NOW | RTLD_NOLOAD);
      if (!taken) break;
      dlclose(taken);
      int next = tries < 64 ? fcntl(fd, F_DUPFD_CLOEXEC, (alt >= 0 ? alt : fd) + 1) : -1;
      if (alt >= 0) close(alt);
      alt = next;
      by_fd = alt >= 0;
      if (by_fd) snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", alt);
    }
    void *h = dlopen(by_fd && access(fdpath, F_OK) == 0 ? fdpath : path, RTLD_LOCAL | RTLD_NOW);
    if (alt >= 0) close(alt);
    if (!h) {
      damaged = true;
    } else {
      void *sym = dlsym(h, entry);
      if (sym) {
        *handle = h;
        *fn = as_kernel(sym);
        ok = true;
      } else {
        dlclose(h); /* the same source with another entry name: compile reports it */
      }
    }
  }
  if (damaged) remove_if_same(path, &st);
done:
  close(fd);
  free(path);
  return ok;
}

/* Removes a build folder and everything in it (cc's own temporary files
 * land there too: TMPDIR points at it). */
static void remove_build_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
      char *p = tpk_path_join(dir, e->d_name);
      if (p) unlink(p);
      free(p);
    }
    closedir(d);
  }
  rmdir(dir);
}

/* The environment for cc: ours with TMPDIR set to the build folder, so
 * that nothing cc writes outlives the build. Frees with free_env. */
static char **env_for_cc(const char *dir) {
  size_t n = 0;
  while (environ[n]) n++;
  char **env = calloc(n + 2, sizeof *env);
  size_t len = strlen(dir);
  char *tmp = malloc(len + 8);
  if (!env || !tmp) {
    free(env);
    free(tmp);
    return NULL;
  }
  memcpy(tmp, "TMPDIR=", 7);
  memcpy(tmp + 7, dir, len + 1);
  env[0] = tmp;
  for (size_t i = 0, k = 1; i < n; i++)
    if (strncmp(environ[i], "TMPDIR=", 7) != 0) env[k++] = environ[i];
  return env;
}

static void free_env(char **env) {
  if (env) free(env[0]);
  free(env);
}

/* Runs the compiler in its own process group, output to `log`. When
 * `tracked`, the worker records the child so that tpk_jit_destroy can stop
 * the group with SIGTERM (the gcc driver then removes its temporary files;
 * SIGKILL would orphan cc1 and as). Returns the wait status, or -1 when the
 * process could not be started. */
static int run_cc(TpkJit *j, char **argv, char **env, const char *log, bool tracked) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  if (posix_spawn_file_actions_init(&fa) != 0) return -1;
  if (posix_spawnattr_init(&attr) != 0) {
    posix_spawn_file_actions_destroy(&fa);
    return -1;
  }
  pid_t pid;
  int rc = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  if (!rc) rc = posix_spawnattr_setpgroup(&attr, 0);
  if (!rc) rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  if (!rc) rc = posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (!rc) rc = posix_spawn_file_actions_adddup2(&fa, 1, 2);
  if (!rc) rc = posix_spawnp(&pid, argv[0], &fa, &attr, argv, env);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc) {
    errno = rc;
    return -1;
  }
  if (tracked) {
    /* Waiting without reaping (WNOWAIT) keeps the pid, and so the group id,
     * ours until `child` is cleared: destroy never signals a recycled one. */
    pthread_mutex_lock(&j->mu);
    j->child = pid;
    if (j->shutdown) kill(-pid, SIGTERM);
    pthread_mutex_unlock(&j->mu);
    siginfo_t info;
    while (waitid(P_PID, (id_t)pid, &info, WEXITED | WNOWAIT) != 0 && errno == EINTR) {
    }
    pthread_mutex_lock(&j->mu);
    j->child = 0;
    pthread_mutex_unlock(&j->mu);
  }
  int status;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return status;
}

/* Builds c's source with cc (counted in n_cc) and loads it: into the cache
 * folder when there is one, else a private temporary folder. On failure
 * returns false with a message (heap) in *msg. */
static bool cc_build(TpkJit *j, TpkCode *c, bool tracked, char **msg) {
  *msg = NULL;
  TpkStr m = {0};
  char *dir = tpk_path_join(j->cache_dir ? j->cache_dir : j->tmp_root, "tpk-build-XXXXXX");
  char *hdr = NULL, *src = NULL, *so = NULL, *log = NULL, *out = NULL, **argv = NULL, **env = NULL;
  if (!dir || !mkdtemp(dir)) {
    tpk_str_printf(&m, "cc: cannot create a build folder in %s: %s", j->cache_dir ? j->cache_dir : j->tmp_root,
                   strerror(errno));
    free(dir);
    *msg = tpk_str_take(&m);
    return false;
  }
  hdr = tpk_path_join(dir, "tpk_prims.h");
  src = tpk_path_join(dir, "kernel.c");
  so = tpk_path_join(dir, "kernel.so");
  log = tpk_path_join(dir, "cc.log");
  size_t nargs = 0;
  while (j->cc_argv[nargs]) nargs++;
  argv = calloc(nargs + 5, sizeof *argv);
  bool ok = false;
  if (!hdr || !src || !so || !log || !argv) {
    tpk_str_puts(&m, "cc: out of memory");
    goto done;
  }
  if (!write_file(hdr, tpk_jit_prims_h) || !write_file(src, c->source)) {
    tpk_str_printf(&m, "cc: cannot write the kernel source in %s: %s", dir, strerror(errno));
    goto done;
  }
  memcpy(argv, j->cc_argv, nargs * sizeof *argv);
  argv[nargs] = "-o";
  argv[nargs + 1] = so;
  argv[nargs + 2] = src;
  argv[nargs + 3] = "-lm";
  if (!(env = env_for_cc(dir))) {
    tpk_str_puts(&m, "cc: out of memory");
    goto done;
  }
  atomic_fetch_add(&j->n_cc, 1);
  int status = run_cc(j, argv, env, log, tracked);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    int why = errno;
    char *text = read_text(log, MAX_LOG);
    if (status == -1) tpk_str_printf(&m, "cc: cannot run '%s': %s", j->cc_argv[0], strerror(why));
    else if (WIFSIGNALED(status)) tpk_str_printf(&m, "cc: '%s' killed by signal %d", j->cc_command, WTERMSIG(status));
    else tpk_str_printf(&m, "cc: '%s' failed (exit %d)", j->cc_command, WEXITSTATUS(status));
    if (text && *text) tpk_str_printf(&m, ":\n%s", text);
    free(text);
    goto done;
  }
  void *h = NULL;
  TpkKernelFn fn = NULL;
  if (j->cache_dir) {
    /* Trailer, then an atomic rename: a racing process renames an equal file. */
    char name[80];
    snprintf(name, sizeof name, "%s.so", c->key);
    out = tpk_path_join(j->cache_dir, name);
    Sha256 s;
    unsigned char trailer[TRAILER_LEN];
    char *body = NULL;
    int fd = open(so, O_RDWR | O_CLOEXEC);
    struct stat st;
    bool stored = fd >= 0 && fstat(fd, &st) == 0 && st.st_size > 0 && st.st_size < MAX_CACHE_FILE &&
                  (body = malloc((size_t)st.st_size)) && read_all(fd, (unsigned char *)body, (size_t)st.st_size);
    if (stored) {
      sha_init(&s);
      sha_update(&s, body, (size_t)st.st_size);
      memcpy(trailer, trailer_magic, 8);
      sha_final(&s, trailer + 8);
      stored = tpk_write_all(fd, trailer, sizeof trailer) && fchmod(fd, 0600) == 0;
    }
    free(body);
    if (fd >= 0 && close(fd) != 0) stored = false;
    if (!stored || !out || rename(so, out) != 0) {
      tpk_str_printf(&m, "cc: cannot store the build in %s: %s", j->cache_dir, strerror(errno));
      goto done;
    }
    if (!cache_load(j, c->key, c->entry, &h, &fn)) {
      tpk_str_printf(&m, "cc: the build of '%s' did not load from the cache, or has no function '%s'", c->entry,
                     c->entry);
      goto done;
    }
  } else {
    h = dlopen(so, RTLD_LOCAL | RTLD_NOW);
    void *sym = h ? dlsym(h, c->entry) : NULL;
    if (!sym) {
      const char *why = dlerror();
      tpk_str_printf(&m, "cc: cannot load the build of '%s': %s", c->entry, why ? why : "no such function");
      if (h) dlclose(h);
      goto done;
    }
    fn = as_kernel(sym);
  }
  c->dl = h;
  atomic_store(&c->fn, fn);
  atomic_store(&c->tier, TPK_TIER_CC);
  ok = true;
done:
  remove_build_dir(dir);
  free(dir);
  free(hdr);
  free(src);
  free(so);
  free(log);
  free(out);
  free(argv);
  free_env(env);
  if (!ok) *msg = tpk_str_take(&m);
  else tpk_str_free(&m);
  return ok;
}

/* ---- Background worker ------------------------------------------------------ */

static void promote(TpkJit *j, TpkCode *c) {
  void *h;
  TpkKernelFn fn;
  if (j->cache_dir && cache_load(j, c->key, c->entry, &h, &fn)) { /* another process built it meanwhile */
    atomic_fetch_add(&j->n_hits, 1);
    c->dl = h;
    atomic_store(&c->fn, fn);
    atomic_store(&c->tier, TPK_TIER_CC);
    return;
  }
  char *msg;
  if (cc_build(j, c, true, &msg)) return;
  pthread_mutex_lock(&j->mu);
  bool cancelled = j->shutdown;
  pthread_mutex_unlock(&j->mu);
  if (cancelled) {
    free(msg);
    return;
  }
  atomic_fetch_add(&j->n_cc_fail, 1);
  c->cc_error = msg;
}

static void *worker_main(void *arg) {
  TpkJit *j = arg;
  pthread_mutex_lock(&j->mu);
  for (;;) {
    while (!j->qhead && !j->shutdown) pthread_cond_wait(&j->work_cv, &j->mu);
    if (j->shutdown) break;
    TpkCode *c = j->qhead;
    j->qhead = c->qnext;
    if (!j->qhead) j->qtail = NULL;
    pthread_mutex_unlock(&j->mu);
    promote(j, c);
    pthread_mutex_lock(&j->mu);
    atomic_store(&c->promo, PROMO_DONE);
    pthread_cond_broadcast(&j->done_cv);
  }
  /* Cancelled: what is still queued keeps its tcc entry. */
  for (TpkCode *c = j->qhead; c; c = c->qnext) atomic_store(&c->promo, PROMO_DONE);
  j->qhead = j->qtail = NULL;
  pthread_cond_broadcast(&j->done_cv);
  pthread_mutex_unlock(&j->mu);
  return NULL;
}

/* Queues c for cc, starting the worker on first use. */
static void enqueue(TpkJit *j, TpkCode *c) {
  pthread_mutex_lock(&j->mu);
  if (atomic_load(&c->promo) != PROMO_NONE) {
    pthread_mutex_unlock(&j->mu);
    return;
  }
  if (!j->worker_started && !j->shutdown) {
    if (pthread_create(&j->worker, NULL, worker_main, j) == 0) j->worker_started = true;
  }
  if (!j->worker_started || j->shutdown) {
    if (!j->shutdown) {
      atomic_fetch_add(&j->n_cc_fail, 1);
      c->cc_error = dup_str("cc: cannot start the background compiler thread");
    }
    atomic_store(&c->promo, PROMO_DONE);
  } else {
    atomic_store(&c->promo, PROMO_PENDING);
    if (j->qtail) j->qtail->qnext = c;
    else j->qhead = c;
    j->qtail = c;
    pthread_cond_signal(&j->work_cv);
  }
  pthread_mutex_unlock(&j->mu);
}

/* ---- Public entry points ------------------------------------------------------ */

static void free_code(TpkCode *c) {
  free_tcc_mem(c->tcc_mem, c->tcc_len);
  if (c->dl) dlclose(c->dl);
  free(c->source);
  free(c->entry);
  free(c->cc_error);
  free(c);
}

TpkStatus tpk_jit_compile(TpkJit *j, const char *source, const char *entry, TpkCode **out, TpkError *err) {
  *out = NULL;
  if (!j || !source || !entry || !*entry) return tpk_error(err, TPK_ERR_INVALID, "tpk_jit_compile: missing argument");
  TpkCode *c = calloc(1, sizeof *c);
  if (!c) return tpk_error(err, TPK_ERR_NOMEM, "out of memory compiling kernel '%s'", entry);
  c->jit = j;
  c->source = dup_str(source);
  c->entry = dup_str(entry);
  atomic_init(&c->fn, NULL);
  atomic_init(&c->tier, (int)TPK_TIER_TCC);
  atomic_init(&c->calls, 0);
  atomic_init(&c->promo, PROMO_NONE);
  if (!c->source || !c->entry) {
    free_code(c);
    return tpk_error(err, TPK_ERR_NOMEM, "out of memory compiling kernel '%s'", entry);
  }
  bool loaded = false;
  if (j->cache_dir && j->tier != TPK_TIER_TCC) {
    void *h;
    TpkKernelFn fn;
    cache_key(j, source, c->key);
    if (cache_load(j, c->key, entry, &h, &fn)) {
      atomic_fetch_add(&j->n_hits, 1);
      c->dl = h;
      atomic_store(&c->fn, fn);
      atomic_store(&c->tier, TPK_TIER_CC);
      loaded = true;
    }
  }
  if (!loaded && j->tier == TPK_TIER_CC) {
    char *msg;
    if (!cc_build(j, c, false, &msg)) {
      atomic_fetch_add(&j->n_cc_fail, 1);
      tpk_error(err, TPK_ERR_INTERNAL, "%s", msg ? msg : "cc: out of memory");
      free(msg);
      free_code(c);
      return TPK_ERR_INTERNAL;
    }
    loaded = true;
  }
  if (!loaded) {
    TpkStatus st = tcc_build(j, c, err);
    if (st != TPK_OK) {
      free_code(c);
      return st;
    }
  }
  if (loaded || j->tier == TPK_TIER_TCC) {
    atomic_store(&c->promo, PROMO_DONE); /* nothing left to do: never counted or queued */
    free(c->source);
    c->source = NULL;
  }
  pthread_mutex_lock(&j->mu);
  c->next = j->codes;
  j->codes = c;
  pthread_mutex_unlock(&j->mu);
  if (j->tier == TPK_TIER_AUTO && !loaded && j->hot_calls == 0) enqueue(j, c);
  *out = c;
  return TPK_OK;
}

TpkKernelFn tpk_code_entry(TpkCode *c) {
  TpkKernelFn fn = atomic_load_explicit(&c->fn, memory_order_acquire);
  if (atomic_load_explicit(&c->promo, memory_order_relaxed) == PROMO_NONE && c->jit->tier == TPK_TIER_AUTO) {
    /* Exactly one caller sees the count reach hot_calls. */
    if (atomic_fetch_add_explicit(&c->calls, 1, memory_order_relaxed) + 1 == c->jit->hot_calls) enqueue(c->jit, c);
  }
  return fn;
}

TpkTier tpk_code_tier(const TpkCode *c) { return (TpkTier)atomic_load(&((TpkCode *)c)->tier); }

void tpk_code_wait_optimized(TpkCode *c) {
  if (atomic_load(&c->promo) != PROMO_PENDING) return;
  TpkJit *j = c->jit;
  pthread_mutex_lock(&j->mu);
  while (atomic_load(&c->promo) == PROMO_PENDING) pthread_cond_wait(&j->done_cv, &j->mu);
  pthread_mutex_unlock(&j->mu);
}

const char *tpk_code_cc_error(const TpkCode *c) {
  return atomic_load(&((TpkCode *)c)->promo) == PROMO_DONE ? c->cc_error : NULL;
}

TpkJitStats tpk_jit_stats(const TpkJit *j) {
  TpkJit *m = (TpkJit *)j; /* atomic loads on a const object predate C17 */
  return (TpkJitStats){atomic_load(&m->n_tcc), atomic_load(&m->n_cc), atomic_load(&m->n_hits),
                       atomic_load(&m->n_cc_fail)};
}

void tpk_jit_destroy(TpkJit *j) {
  if (!j) return;
  pthread_mutex_lock(&j->mu);
  j->shutdown = true;
  if (j->child > 0) kill(-j->child, SIGTERM); /* a cancelled -O3 build need not finish */
  pthread_cond_broadcast(&j->work_cv);
  bool started = j->worker_started;
  pthread_mutex_unlock(&j->mu);
  if (started) pthread_join(j->worker, NULL);
  for (TpkCode *c = j->codes, *next; c; c = next) {
    next = c->next;
    free_code(c);
  }
  pthread_cond_destroy(&j->done_cv);
  pthread_cond_destroy(&j->work_cv);
  pthread_mutex_destroy(&j->mu);
  for (size_t i = 0; j->cc_argv[i]; i++) free(j->cc_argv[i]);
  free(j->cc_argv);
  free(j->cc_command);
  free(j->cache_dir);
  free(j->tmp_root);
  free(j->tcc_lib);
  free(j);
}
