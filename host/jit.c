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
 * A code may hold several kernels, one source defining each entry (a
 * compiled graph's clusters: tpk_jit_compile_all): one compile per tier,
 * one cache entry, one shared object to read, authenticate and dlopen; its
 * entries' pointers are swapped together when it is promoted.
 *
 * The disk cache (the trust model is in jit.h). An entry is <dir>/<name>.so,
 * <name> the SHA-256 (hex) of a format tag, the cc command and its flags,
 * the compiler binary's identity (path, size, mtime), the text of
 * tpk_prims.h and the source: SHA-256 rather than a fast 64- or 128-bit
 * hash, since a collision would silently run another kernel's code, and the
 * cost (microseconds) is nothing next to cc. Keyed code replaces the source
 * by tpk's build and the caller's key words. The file is the shared object
 * followed by a trailer: a magic tag and HMAC-SHA256(key, tag, name, bytes)
 * (ELF loaders ignore trailing bytes). A unit is <dir>/<name>.unit, <name>
 * the SHA-256 of another tag, tpk's build and its key words, its bytes
 * followed by the same trailer (the MAC's name is the file's, suffix
 * included, so no entry of one kind passes for the other). A lookup reads
 * the whole file, checks
 * the MAC, then loads the bytes it checked from a memfd: never the file by
 * name again, which another writer of a shared folder could swap between
 * the check and dlopen. dlopen does not validate a file and may crash on a
 * truncated one; nothing reaches it that did not authenticate.
 *
 * Builds run in a private folder tpk-build-<pid>-<host>-XXXXXX: inside the
 * cache folder when that is private (this user's, writable by no one else),
 * else under $TMPDIR; never in a folder others can write, where they could
 * change the source between our write and cc's read. A build is stored by
 * writing a temporary file in the cache folder and renaming it over the
 * entry's name, so readers see a whole entry or none. After each store the
 * folder is tidied under an flock of <dir>/lock: entries beyond the size
 * limit go, least recently used first (a hit touches its entry's mtime),
 * and so do build folders whose process is gone.
 *
 * Codes are reference counted: the caller's reference (the runtime's unit
 * of compiled code) and the worker's while a promotion is queued or runs;
 * the last release frees the tcc memory and dlcloses the build. A code
 * whose caller let go before its promotion started is not built.
 */
/* memfd_create (Linux): the authenticated bytes are loaded from memory. */
#define _GNU_SOURCE
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
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libtcc.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h> /* the SHA extensions (sha_blocks_ni) */
#define HAVE_SHA_NI 1
#endif

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
  KEY_BYTES = 32,                    /* a new key; also the least a key file may hold */
  MAX_KEY_FILE = 4096,
  /* A build folder whose process is gone (this host) is removed after this
   * long untouched: the margin covers a process in another pid namespace
   * that shares the folder and the host name. */
  STALE_BUILD_SECONDS = 15 * 60,
  /* One from another host, or unnamed (an older tpk's), only by its age. */
  STALE_FOREIGN_BUILD_SECONDS = 24 * 3600,
};
#define DEFAULT_CACHE_MAX ((int64_t)1 << 30)

/* The trailer appended to every cache file: the magic tag, then the MAC. */
static const char trailer_magic[8] = {'T', 'P', 'K', 'J', 'I', 'T', '0', '2'};
enum { TRAILER_LEN = 8 + 32 };
static const char build_prefix[] = "tpk-build-";

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

static void sha_block_portable(Sha256 *s, const unsigned char *p) {
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

/* The same with the x86 SHA extensions, about ten times faster: every load
 * of a cache entry authenticates all its bytes. Four rounds per step; the
 * state is kept as ABEF and CDGH, the order the instructions take. */
#ifdef HAVE_SHA_NI
__attribute__((target("sha,sse4.1"))) static void sha_blocks_ni(Sha256 *s, const unsigned char *p, size_t n) {
  const __m128i swap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL); /* big-endian words */
  __m128i t = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&s->h[0]), 0xB1); /* CDAB */
  __m128i s1 = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&s->h[4]), 0x1B); /* EFGH */
  __m128i s0 = _mm_alignr_epi8(t, s1, 8);                                            /* ABEF */
  s1 = _mm_blend_epi16(s1, t, 0xF0);                                                 /* CDGH */
  for (; n; n--, p += 64) {
    __m128i abef = s0, cdgh = s1, w[16];
    for (int i = 0; i < 16; i++) {
      if (i < 4) {
        w[i] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * i)), swap);
      } else { /* w[t] = s1(w[t-2]) + w[t-7] + s0(w[t-15]) + w[t-16], four at a time */
        __m128i x = _mm_add_epi32(_mm_sha256msg1_epu32(w[i - 4], w[i - 3]), _mm_alignr_epi8(w[i - 1], w[i - 2], 4));
        w[i] = _mm_sha256msg2_epu32(x, w[i - 1]);
      }
      __m128i m = _mm_add_epi32(w[i], _mm_loadu_si128((const __m128i *)&sha_k[4 * i]));
      s1 = _mm_sha256rnds2_epu32(s1, s0, m);
      s0 = _mm_sha256rnds2_epu32(s0, s1, _mm_shuffle_epi32(m, 0x0E));
    }
    s0 = _mm_add_epi32(s0, abef);
    s1 = _mm_add_epi32(s1, cdgh);
  }
  t = _mm_shuffle_epi32(s0, 0x1B);       /* FEBA */
  s1 = _mm_shuffle_epi32(s1, 0xB1);      /* DCHG */
  s0 = _mm_blend_epi16(t, s1, 0xF0);     /* DCBA */
  s1 = _mm_alignr_epi8(s1, t, 8);        /* HGFE */
  _mm_storeu_si128((__m128i *)&s->h[0], s0);
  _mm_storeu_si128((__m128i *)&s->h[4], s1);
}
#endif

/* n blocks of 64 bytes at p. */
static void sha_blocks(Sha256 *s, const unsigned char *p, size_t n) {
#ifdef HAVE_SHA_NI
  if (__builtin_cpu_supports("sha") && __builtin_cpu_supports("sse4.1")) {
    sha_blocks_ni(s, p, n);
    return;
  }
#endif
  for (; n; n--, p += 64) sha_block_portable(s, p);
}

static void sha_init(Sha256 *s) {
  static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(s->h, iv, sizeof iv);
  s->len = 0;
  s->fill = 0;
}

static void sha_update(Sha256 *s, const void *data, size_t n) {
  if (!n) return; /* data may be NULL */
  const unsigned char *p = data;
  s->len += n;
  if (s->fill) {
    size_t take = 64 - s->fill < n ? 64 - s->fill : n;
    memcpy(s->buf + s->fill, p, take);
    s->fill += take, p += take, n -= take;
    if (s->fill < 64) return;
    sha_blocks(s, s->buf, 1);
    s->fill = 0;
  }
  sha_blocks(s, p, n / 64);
  p += n / 64 * 64, n %= 64;
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

/* ---- HMAC-SHA256 (RFC 2104) ------------------------------------------------ */

/* The two hash states after the padded key: a MAC is then the inner state
 * fed the message, finished, and fed to the outer. */
typedef struct Hmac {
  Sha256 inner, outer;
} Hmac;

static void hmac_init(Hmac *m, const void *key, size_t len) {
  unsigned char k0[64] = {0}, pad[64];
  if (len > 64) {
    Sha256 s;
    sha_init(&s);
    sha_update(&s, key, len);
    sha_final(&s, k0);
  } else if (len) {
    memcpy(k0, key, len);
  }
  for (int i = 0; i < 64; i++) pad[i] = k0[i] ^ 0x36;
  sha_init(&m->inner);
  sha_update(&m->inner, pad, 64);
  for (int i = 0; i < 64; i++) pad[i] = k0[i] ^ 0x5c;
  sha_init(&m->outer);
  sha_update(&m->outer, pad, 64);
}

/* `inner` is a copy of m->inner that absorbed the message. */
static void hmac_final(const Hmac *m, Sha256 *inner, unsigned char out[32]) {
  unsigned char d[32];
  sha_final(inner, d);
  Sha256 o = m->outer;
  sha_update(&o, d, 32);
  sha_final(&o, out);
}

void tpk_jit_hmac_sha256(const void *key, size_t key_len, const void *msg, size_t len, unsigned char out[32]) {
  Hmac m;
  hmac_init(&m, key, key_len);
  Sha256 s = m.inner;
  sha_update(&s, msg, len);
  hmac_final(&m, &s, out);
}

/* Equal without an early exit: how long a comparison takes says nothing of
 * where a forged MAC first differs. */
static bool same_mac(const unsigned char *a, const unsigned char *b) {
  unsigned char diff = 0;
  for (int i = 0; i < 32; i++) diff |= (unsigned char)(a[i] ^ b[i]);
  return diff == 0;
}

/* ---- Types ------------------------------------------------------------------ */

enum { PROMO_NONE, PROMO_PENDING, PROMO_DONE }; /* TpkCode.promo */

struct TpkCode {
  TpkJit *jit;
  int nentries;            /* the functions its source defines, one per kernel */
  char **entries;
  _Atomic(TpkKernelFn) *fns; /* what tpk_code_entry_at hands out, per entry */
  atomic_int tier;         /* TpkTier of fns */
  atomic_int calls;        /* counted until the promotion is queued */
  atomic_int promo;        /* PROMO_*: set under jit->mu, read without it */
  char *source;            /* kept while a promotion may need it */
  char key[65];            /* cache file name stem (hex), "" when unused */
  atomic_int refs;         /* the caller's, and the worker's while promotion is pending */
  TpkWorkspaceFn *workspaces; /* per entry: <entry>_workspace of the first build, or NULL */
  void *tcc_mem;           /* code relocated by tcc (page aligned), or NULL */
  size_t tcc_len;
  void *dl;                /* dlopen handle of the cc build, or NULL */
  char *cc_error;          /* message of a failed background cc, or NULL */
  char *note;              /* set before the code is handed out, then fixed */
  char *cc_note;           /* set by the background build before promo is PROMO_DONE */
  atomic_bool from_cache;  /* fns came from the disk cache */
  TpkCode *next, *prev;    /* the codes of the jit not freed yet */
  TpkCode *qnext;          /* the worker's queue */
};

struct TpkJit {
  TpkTier tier;
  int hot_calls;
  char *cache_path;   /* the cache folder configured, used or not; NULL: none */
  char *cache_dir;    /* the same when the disk cache is in use, else NULL */
  char *cache_note;   /* why it is not in use (for a user), or NULL */
  char *key_file;     /* the key file in use, or NULL */
  bool build_in_cache; /* the cache folder is private: build folders go there */
  int64_t cache_max;  /* bytes */
  Hmac mac;           /* keyed by the key file's contents */
  char *tmp_root;     /* parent of build folders outside the cache */
  char host[72];      /* this host's name, as build folder names carry it */
  atomic_bool tmp_tidied; /* stale build folders under tmp_root removed once */
  char *tcc_lib;      /* tcc's folder (include/, libtcc1.a) */
  char **cc_argv;     /* compiler words and flags, NULL-terminated */
  char *cc_command;   /* the same, space-separated, for messages */
  Sha256 key_base;    /* the cache key with everything but the source */

  pthread_mutex_t mu; /* guards everything below */
  pthread_cond_t work_cv, done_cv;
  TpkCode *codes, *qhead, *qtail;
  int ncodes;
  bool worker_started, shutdown;
  pthread_t worker;
  pid_t child; /* cc process the worker waits on, 0 if none */

  atomic_int n_tcc, n_cc, n_hits, n_cc_fail, n_misses, n_rejects;
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
  const char *isa = getenv("TPK_CC_ISA");
  o->isa = isa && *isa ? isa : NULL;
  if (o->isa && strcmp(isa, "generic") != 0 && strcmp(isa, "avx2") != 0 && strcmp(isa, "avx512") != 0)
    return tpk_error(err, TPK_ERR_INVALID, "TPK_CC_ISA=%s: expected generic, avx2 or avx512", isa);
  const char *k = getenv("TPK_CACHE_KEY_FILE");
  o->key_file = k && *k ? k : NULL;
  const char *m = getenv("TPK_CACHE_MAX");
  if (m && *m && (o->cache_max = tpk_parse_bytes(m)) <= 0)
    return tpk_error(err, TPK_ERR_INVALID, "TPK_CACHE_MAX=%s: expected a size in bytes, such as 536870912, 512M or 2G",
                     m);
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

/* The instruction sets cc may build for, narrowest first, with their flags. */
typedef struct CcIsa {
  const char *name;
  const char *flags[8]; /* NULL-terminated */
} CcIsa;
static const CcIsa cc_isas[] = {
    {"generic", {NULL}},
    {"avx2", {"-mavx2", "-mfma", NULL}},
    /* 512 bits preferred outright: a compiler may otherwise tune for 256
     * (cc's GELU 512x1024 takes 0.77 ms at 256, 0.58 at 512, one thread) */
    {"avx512", {"-mavx2", "-mfma", "-mavx512f", "-mavx512bw", "-mavx512dq", "-mavx512vl",
                "-mprefer-vector-width=512"}},
};

/* Can this CPU run code built for cc_isas[i]? */
static bool cpu_runs(size_t i) {
  if (i == 0) return true;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (i == 1) return avx2;
  return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

/* cc_isas' index of `name` in *out (NULL: the widest this CPU runs); an
 * unknown set, or one this CPU cannot run, is an error. */
static TpkStatus choose_isa(const char *name, int *out, TpkError *err) {
  if (!name || !*name) {
    int i = (int)TPK_ARRAY_LEN(cc_isas) - 1;
    while (!cpu_runs((size_t)i)) i--;
    *out = i;
    return TPK_OK;
  }
  for (size_t i = 0; i < TPK_ARRAY_LEN(cc_isas); i++)
    if (strcmp(name, cc_isas[i].name) == 0) {
      if (!cpu_runs(i))
        return tpk_error(err, TPK_ERR_INVALID, "instruction set '%s': this CPU cannot run code built for it", name);
      *out = (int)i;
      return TPK_OK;
    }
  return tpk_error(err, TPK_ERR_INVALID, "instruction set '%s': expected generic, avx2 or avx512", name);
}

/* The compiler words ($CC may be "ccache gcc"), then our flags and the
 * instruction set's (never -march=native: a shared cache must stay loadable
 * on other machines; the set is named in the key, so a machine without it
 * misses rather than loads what it cannot run).
 * -ffp-contract=off keeps cc from fusing a*b+c, which tcc never does, so
 * both tiers compute the same bits; -fno-math-errno lets sqrtf be an
 * instruction in vectorised loops (the results are the same); -lm for
 * scalar math in kernels.
 * -z noseparate-code keeps the linker from padding each segment to a page:
 * a kernel's object is a third smaller (7 KB, not 15, for a small one),
 * which every load of it from the cache reads and authenticates. */
static bool build_cc_argv(TpkJit *j, const char *cc, int isa) {
  static const char *const flags[] = {"-O3", "-fPIC", "-shared", "-ffp-contract=off", "-fno-math-errno",
                                      "-Wl,-z,noseparate-code"};
  const char *const *isa_flags = cc_isas[isa].flags;
  size_t nisa = 0;
  while (isa_flags[nisa]) nisa++;
  size_t nwords = 0;
  for (const char *s = cc; *s;) {
    s += strspn(s, " \t");
    if (!*s) break;
    nwords++;
    s += strcspn(s, " \t");
  }
  if (nwords == 0) return false;
  size_t n = nwords + TPK_ARRAY_LEN(flags) + nisa + 1;
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
  for (size_t i = 0; i < nisa; i++)
    if (!(j->cc_argv[k++] = dup_str(isa_flags[i]))) return false;
  TpkStr cmd = {0};
  for (size_t i = 0; j->cc_argv[i]; i++) tpk_str_printf(&cmd, "%s%s", i ? " " : "", j->cc_argv[i]);
  j->cc_command = tpk_str_take(&cmd);
  if (cmd.failed) return false;

  sha_init(&j->key_base);
  sha_puts(&j->key_base, "tpk jit cache v2"); /* v1 entries had no MAC */
  sha_puts(&j->key_base, "isa");
  sha_puts(&j->key_base, cc_isas[isa].name);
  for (size_t i = 0; j->cc_argv[i]; i++) sha_puts(&j->key_base, j->cc_argv[i]);
  hash_compiler_identity(&j->key_base, j->cc_argv[0]);
  sha_puts(&j->key_base, tpk_jit_prims_h);
  return true;
}

static void hex_digest(Sha256 *s, char hex[65]) {
  unsigned char d[32];
  sha_final(s, d);
  for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

static void cache_key(const TpkJit *j, const char *source, char hex[65]) {
  Sha256 s = j->key_base;
  sha_puts(&s, source);
  hex_digest(&s, hex);
}

/* Words as bytes, little-endian whatever the host, after their count. */
static void sha_words(Sha256 *s, const uint64_t *key, int nwords) {
  unsigned char b[8];
  for (int i = -1; i < nwords; i++) {
    uint64_t w = i < 0 ? (uint64_t)nwords : key[i];
    for (int k = 0; k < 8; k++) b[k] = (unsigned char)(w >> (8 * k));
    sha_update(s, b, 8);
  }
}

/* The stem of code compiled under a key: the compiler's identity (key_base),
 * tpk's build and the words, where cache_key has the source. */
static void keyed_code_key(const TpkJit *j, const uint64_t *key, int nwords, char *const *entries, int nentries,
                           char hex[65]) {
  Sha256 s = j->key_base;
  sha_puts(&s, "keyed code");
  sha_puts(&s, tpk_build_id);
  for (int i = 0; i < nentries; i++) sha_puts(&s, entries[i]);
  sha_words(&s, key, nwords);
  hex_digest(&s, hex);
}

/* The stem of a unit: tpk's build and the words (no compiler: a unit is
 * not code). */
static void unit_key(const uint64_t *key, int nwords, char hex[65]) {
  Sha256 s;
  sha_init(&s);
  sha_puts(&s, "tpk unit v1");
  sha_puts(&s, tpk_build_id);
  sha_words(&s, key, nwords);
  hex_digest(&s, hex);
}

/* ---- The cache's key and folder ------------------------------------------------ */

/* $XDG_CONFIG_HOME/tpk/cache.key, else ~/.config/tpk/cache.key (heap), or
 * NULL when no home is known. */
static char *default_key_path(void) {
  const char *d = getenv("XDG_CONFIG_HOME");
  if (d && d[0] == '/') return tpk_path_join(d, "tpk/cache.key"); /* the XDG spec ignores relative values */
  d = getenv("HOME");
  if (d && d[0] == '/') return tpk_path_join(d, ".config/tpk/cache.key");
  return NULL;
}

static bool random_bytes(unsigned char *buf, size_t n) {
  while (n) {
    ssize_t r = getrandom(buf, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    buf += r, n -= (size_t)r;
  }
  if (!n) return true;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC); /* a kernel without getrandom */
  bool ok = fd >= 0 && read_all(fd, buf, n);
  if (fd >= 0) close(fd);
  return ok;
}

/* Makes the key file `path` unless there is one: 32 random bytes go to a
 * new temporary file (mode 0600) that is then linked to `path`. link,
 * unlike rename, fails when `path` exists, so of two processes starting at
 * once one makes the key and both read that one. */
static bool create_key_file(const char *path) {
  char *dir = dup_str(path);
  char *slash = dir ? strrchr(dir, '/') : NULL;
  if (slash && slash != dir) {
    *slash = 0;
    tpk_make_dirs(dir); /* 0700; a failure shows below */
  }
  free(dir);
  size_t n = strlen(path) + 16;
  char *tmp = malloc(n);
  if (!tmp) return false;
  snprintf(tmp, n, "%s.tmp-XXXXXX", path);
  int fd = mkostemp(tmp, O_CLOEXEC);
  unsigned char key[KEY_BYTES];
  bool ok = fd >= 0 && random_bytes(key, sizeof key) && tpk_write_all(fd, key, sizeof key) && fsync(fd) == 0;
  if (fd >= 0 && close(fd) != 0) ok = false;
  if (ok && link(tmp, path) != 0 && errno != EEXIST) ok = false;
  int why = errno;
  if (fd >= 0) unlink(tmp);
  free(tmp);
  memset(key, 0, sizeof key);
  errno = why;
  return ok;
}

/* Is `path` inside folder `dir` (both resolved)? */
static bool is_inside(const char *path, const char *dir) {
  char *p = realpath(path, NULL), *d = realpath(dir, NULL);
  size_t n = d ? strlen(d) : 0;
  bool in = p && d && strncmp(p, d, n) == 0 && (p[n] == '/' || strcmp(d, "/") == 0);
  free(p);
  free(d);
  return in;
}

/* Keys j's MACs with the key file `path` when the rule of jit.h allows it
 * (making the file first when `create` and there is none); else says why
 * not in *why. */
static bool use_key_file(TpkJit *j, const char *path, bool create, TpkStr *why) {
  int flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK; /* a FIFO planted there must not hang us */
  int fd = open(path, flags);
  if (fd < 0 && errno == ENOENT && create) {
    if (!create_key_file(path)) {
      tpk_str_printf(why, "the cache key file %s cannot be made: %s", path, strerror(errno));
      return false;
    }
    fd = open(path, flags);
  }
  if (fd < 0) {
    tpk_str_printf(why, "the cache key file %s cannot be read: %s", path, strerror(errno));
    return false;
  }
  struct stat st;
  unsigned char *key = NULL;
  size_t len = 0;
  bool ok = false;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    tpk_str_printf(why, "the cache key file %s is not a regular file", path);
  } else if (st.st_uid != geteuid() && st.st_uid != 0) {
    tpk_str_printf(why, "the cache key file %s belongs to another user (uid %ld), not to you or root", path,
                   (long)st.st_uid);
  } else if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    tpk_str_printf(why, "the cache key file %s can be written by its group or by others", path);
  } else if (st.st_mode & S_IRWXO) {
    tpk_str_printf(why, "the cache key file %s can be read by others", path);
  } else if (st.st_size < KEY_BYTES || st.st_size > MAX_KEY_FILE) {
    tpk_str_printf(why, "the cache key file %s holds %lld bytes, not %d to %d", path, (long long)st.st_size, KEY_BYTES,
                   MAX_KEY_FILE);
  } else if (!(key = malloc((size_t)st.st_size)) || !read_all(fd, key, (size_t)st.st_size)) {
    tpk_str_printf(why, "the cache key file %s cannot be read", path);
  } else if (is_inside(path, j->cache_path)) {
    tpk_str_printf(why, "the cache key file %s is inside the cache folder %s", path, j->cache_path);
  } else {
    len = (size_t)st.st_size;
    ok = true;
  }
  close(fd);
  if (ok) hmac_init(&j->mac, key, len);
  if (key) memset(key, 0, len);
  free(key);
  return ok;
}

/* The disk cache from the options: in use with a folder and a key that
 * may be used, else off with a note for the user (none when it was turned
 * off on purpose: TPK_CACHE_DIR="" or TPK_TIER=tcc). */
static bool setup_cache(TpkJit *j, const TpkJitOptions *o) {
  j->cache_max = o->cache_max > 0 ? o->cache_max : DEFAULT_CACHE_MAX;
  j->cache_path = o->cache_dir ? (*o->cache_dir ? dup_str(o->cache_dir) : NULL) : tpk_cache_root();
  if (!j->cache_path || j->tier == TPK_TIER_TCC) return true;
  TpkStr why = {0};
  char *key = o->key_file ? dup_str(o->key_file) : default_key_path();
  struct stat st;
  if (!tpk_make_dirs(j->cache_path) || stat(j->cache_path, &st) != 0) {
    tpk_str_printf(&why, "the cache folder %s cannot be made: %s", j->cache_path, strerror(errno));
  } else if (!S_ISDIR(st.st_mode)) {
    tpk_str_printf(&why, "the cache folder %s is not a folder", j->cache_path);
  } else if (!key) {
    tpk_str_puts(&why, "no cache key file: set TPK_CACHE_KEY_FILE, or HOME for a key of your own");
  } else if (use_key_file(j, key, !o->key_file, &why)) {
    j->cache_dir = dup_str(j->cache_path);
    j->key_file = key;
    key = NULL;
    j->build_in_cache = tpk_dir_is_private(j->cache_path);
  }
  free(key);
  if (why.len) {
    tpk_str_puts(&why, ": the compilation cache is off");
    j->cache_note = tpk_str_take(&why);
  }
  tpk_str_free(&why);
  return !why.failed && (!j->cache_path || j->cache_dir || j->cache_note);
}

/* This host's name as build folder names carry it: letters, digits, '.'
 * and '_' ('-' separates the name's fields). */
static void host_name(char out[72]) {
  char h[65] = "";
  if (gethostname(h, sizeof h - 1) != 0 || !h[0]) snprintf(h, sizeof h, "unknown");
  size_t n = 0;
  for (const char *p = h; *p && n < 64; p++) {
    char c = *p;
    out[n++] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ? c : '_';
  }
  out[n] = 0;
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
  int isa = 0;
  TpkStatus st = choose_isa(o->isa, &isa, err);
  if (st != TPK_OK) return st;
  TpkJit *j = calloc(1, sizeof *j);
  if (!j) return tpk_error(err, TPK_ERR_NOMEM, "out of memory creating the JIT");
  j->tier = o->tier;
  j->hot_calls = o->hot_calls < 0 ? DEFAULT_HOT_CALLS : o->hot_calls > MAX_HOT_CALLS ? MAX_HOT_CALLS : o->hot_calls;
  const char *cc = o->cc ? o->cc : getenv("CC");
  const char *tmp = getenv("TMPDIR");
  j->tmp_root = dup_str(tmp && tmp[0] == '/' ? tmp : "/tmp");
  j->tcc_lib = dup_str(tcc_lib_dir());
  host_name(j->host);
  atomic_init(&j->tmp_tidied, false);
  /* An unusable cache folder or key is not an error: kernels still compile. */
  bool ok = j->tmp_root && j->tcc_lib && build_cc_argv(j, cc && *cc ? cc : "cc", isa) && setup_cache(j, o);
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
  free(j->cache_path);
  free(j->cache_dir);
  free(j->cache_note);
  free(j->key_file);
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
  if (!text) return tpk_error(err, TPK_ERR_NOMEM, "out of memory compiling kernel '%s'", c->entries[0]);
  TpkStr log = {0};
  void *mem = NULL;
  size_t len = 0;
  const char *failed = NULL, *missing = NULL;

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
      } else {
        for (int i = 0; i < c->nentries && !failed; i++) {
          void *sym = tcc_get_symbol(s, c->entries[i]);
          char ws_name[256];
          snprintf(ws_name, sizeof ws_name, "%s_workspace", c->entries[i]);
          void *ws = sym ? tcc_get_symbol(s, ws_name) : NULL;
          if (!sym) failed = "entry", missing = c->entries[i];
          else atomic_store(&c->fns[i], as_kernel(sym));
          if (ws) memcpy(&c->workspaces[i], &ws, sizeof ws);
        }
      }
    }
    tcc_delete(s);
  }
  pthread_mutex_unlock(&tcc_lock);
  free(text);

  TpkStatus st = TPK_OK;
  if (failed && strcmp(failed, "entry") == 0)
    st = tpk_error(err, TPK_ERR_INTERNAL, "tcc: kernel source defines no function '%s'", missing);
  else if (failed)
    st = tpk_error(err, TPK_ERR_INTERNAL, "tcc could not compile kernel '%s' (%s):\n%s", c->entries[0], failed,
                   log.data ? log.data : "(no message)");
  tpk_str_free(&log);
  if (st != TPK_OK) {
    free_tcc_mem(mem, len);
    return st;
  }
  c->tcc_mem = mem;
  c->tcc_len = len;
  atomic_store(&c->tier, TPK_TIER_TCC);
  return TPK_OK;
}

/* ---- Disk cache ------------------------------------------------------------ */

typedef enum Lookup { LOOKUP_MISS, LOOKUP_HIT, LOOKUP_REJECTED } Lookup;
typedef enum Load { LOAD_OK, LOAD_FAILED, LOAD_NO_ENTRY } Load;

/* A cache entry as a scan of the folder sees it. */
typedef struct Entry {
  char name[72]; /* <64 hex digits>.so or .unit */
  struct timespec mtime;
  int64_t size;
} Entry;

/* What a scan of a folder found. */
typedef struct Scan {
  Entry *entries;
  size_t n, cap;
  int64_t bytes;         /* of the entries */
  int64_t builds;        /* build folders (and temporary files) kept */
  int64_t stale_removed; /* build folders removed as stale */
} Scan;

static const char code_suffix[] = ".so", unit_suffix[] = ".unit";

static void entry_name(const char *key, const char *suffix, char name[72]) { snprintf(name, 72, "%s%s", key, suffix); }

static bool is_entry_name(const char *name) {
  if (strlen(name) < 64 || (strcmp(name + 64, code_suffix) != 0 && strcmp(name + 64, unit_suffix) != 0)) return false;
  for (int i = 0; i < 64; i++)
    if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f'))) return false;
  return true;
}

/* The MAC of entry `key` holding `body`: the trailer's second part. The
 * name is covered (a code's stem, a unit's file name), so an entry renamed
 * to another kernel's or unit's name fails. */
static void entry_mac(const TpkJit *j, const char *key, const unsigned char *body, size_t len, unsigned char out[32]) {
  Sha256 s = j->mac.inner;
  sha_update(&s, trailer_magic, sizeof trailer_magic);
  sha_puts(&s, key);
  sha_update(&s, body, len);
  hmac_final(&j->mac, &s, out);
}

/* Removes `path` if it is still the file `st` describes (another process may
 * have renamed a good build over it meanwhile). */
static void remove_if_same(const char *path, const struct stat *st) {
  struct stat now;
  if (lstat(path, &now) == 0 && now.st_dev == st->st_dev && now.st_ino == st->st_ino) unlink(path);
}

/* "tpk-build-<pid>-<host>-": what names this process's build folders and
 * temporary files; mkdtemp or mkstemp adds six characters. */
static void build_name(const TpkJit *j, char *out, size_t size) {
  snprintf(out, size, "%s%ld-%s-XXXXXX", build_prefix, (long)getpid(), j->host);
}

/* A new private (0700) build folder under `parent` (heap), or NULL with
 * errno set. */
static char *make_build_dir(const TpkJit *j, const char *parent) {
  char name[128];
  build_name(j, name, sizeof name);
  char *dir = tpk_path_join(parent, name);
  if (dir && !mkdtemp(dir)) {
    int why = errno;
    free(dir);
    errno = why;
    return NULL;
  }
  return dir;
}

/* Removes build folder (or temporary file) `name` of the folder dirfd, and
 * the files in it (cc's own temporary files land there too: TMPDIR points
 * at it). Never follows a symlink: the name may be in a folder others can
 * write. */
static bool remove_build_at(int dirfd, const char *name) {
  int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return unlinkat(dirfd, name, 0) == 0; /* a file */
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return false;
  }
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) unlinkat(fd, e->d_name, 0);
  closedir(d);
  return unlinkat(dirfd, name, AT_REMOVEDIR) == 0;
}

static void remove_build_dir(const char *dir) { remove_build_at(AT_FDCWD, dir); }

/* Was build folder (or temporary file) `name`, which st describes, left by
 * a process that is gone? Only this user's count. The name says which
 * process on which host made it (build_name): on this host a live process
 * keeps its folder, whatever its age; another host's, or a name without a
 * process, only its age can retire. */
static bool is_stale_build(const TpkJit *j, const char *name, const struct stat *st, time_t now) {
  if (st->st_uid != geteuid()) return false;
  double age = difftime(now, st->st_mtime);
  const char *p = name + sizeof build_prefix - 1, *end = p;
  long pid = 0;
  while (*end >= '0' && *end <= '9' && pid < 100000000) pid = pid * 10 + (*end++ - '0');
  size_t hlen = strlen(j->host);
  bool here = end != p && *end == '-' && strncmp(end + 1, j->host, hlen) == 0 && end[1 + hlen] == '-' &&
              strlen(end + 2 + hlen) == 6;
  if (!here) return age > STALE_FOREIGN_BUILD_SECONDS;
  if (pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno == EPERM) return false;
  return age > STALE_BUILD_SECONDS;
}

/* Lists the entries of the folder dfd and counts its build folders; with
 * `remove_stale`, removes the stale ones on the way. False when out of
 * memory or the folder cannot be read. */
static bool scan_folder(const TpkJit *j, int dfd, bool remove_stale, Scan *sc) {
  int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (!d) {
    if (fd >= 0) close(fd);
    return false;
  }
  time_t now = time(NULL);
  bool ok = true;
  struct dirent *e;
  struct stat st;
  while ((e = readdir(d))) {
    if (is_entry_name(e->d_name)) {
      if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
      if (sc->n == sc->cap) {
        size_t cap = sc->cap ? 2 * sc->cap : 64;
        Entry *grown = realloc(sc->entries, cap * sizeof *grown);
        if (!grown) {
          ok = false;
          break;
        }
        sc->entries = grown;
        sc->cap = cap;
      }
      Entry *x = &sc->entries[sc->n++];
      size_t len = strlen(e->d_name); /* is_entry_name: 67 or 69 */
      memcpy(x->name, e->d_name, len < sizeof x->name ? len + 1 : 0);
      x->mtime = st.st_mtim;
      x->size = (int64_t)st.st_size;
      sc->bytes += x->size;
    } else if (strncmp(e->d_name, build_prefix, sizeof build_prefix - 1) == 0) {
      if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      if (remove_stale && is_stale_build(j, e->d_name, &st, now) && remove_build_at(dfd, e->d_name)) sc->stale_removed++;
      else sc->builds++;
    }
  }
  closedir(d);
  return ok;
}

/* Opens the folder `dir` and takes its lock, an flock of <dir>/lock, for
 * what must not run twice at once (eviction, clearing). Returns the
 * folder's descriptor, or -1 with errno; *lock is the lock's descriptor,
 * or -1 when the lock file cannot be had (a folder we cannot write: we
 * cannot remove anything from it either). */
static int lock_folder(const char *dir, int *lock) {
  *lock = -1;
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return -1;
  int flags = O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC; /* NONBLOCK: a FIFO planted there must not hang us */
  int fd = openat(dfd, "lock", O_RDWR | O_CREAT | flags, 0644);
  if (fd < 0) fd = openat(dfd, "lock", O_RDONLY | flags); /* a shared folder's, made by someone else */
  struct stat st;
  if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
    close(fd);
    fd = -1;
  }
  while (fd >= 0 && flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      close(fd);
      fd = -1;
    }
  }
  *lock = fd;
  return dfd;
}

static void unlock_folder(int dfd, int lock) {
  if (lock >= 0) close(lock); /* closing releases the flock */
  close(dfd);
}

static int older_first(const void *a, const void *b) {
  const Entry *x = a, *y = b;
  if (x->mtime.tv_sec != y->mtime.tv_sec) return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
  if (x->mtime.tv_nsec != y->mtime.tv_nsec) return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* After a store, under the folder's lock: removes stale build folders, and
 * entries beyond the size limit, least recently used first (a hit touches
 * its entry's mtime). Removing an entry that another process is reading or
 * has loaded is safe on Linux: unlink drops the name, and an open or
 * mapped file lives on until it is closed and unmapped (here, besides,
 * what a process loads is its own memfd copy). */
static void tidy_cache(TpkJit *j) {
  int lock;
  int dfd = lock_folder(j->cache_dir, &lock);
  if (dfd < 0) return;
  Scan sc = {0};
  if (lock >= 0 && scan_folder(j, dfd, true, &sc) && sc.bytes > j->cache_max) {
    qsort(sc.entries, sc.n, sizeof *sc.entries, older_first);
    for (size_t i = 0; i < sc.n && sc.bytes > j->cache_max; i++)
      if (unlinkat(dfd, sc.entries[i].name, 0) == 0 || errno == ENOENT) sc.bytes -= sc.entries[i].size;
  }
  free(sc.entries);
  unlock_folder(dfd, lock);
}

/* Stale build folders under tmp_root, removed before this JIT's first build
 * there. */
static void tidy_tmp_once(TpkJit *j) {
  if (atomic_exchange(&j->tmp_tidied, true)) return;
  int dfd = open(j->tmp_root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return;
  Scan sc = {0};
  scan_folder(j, dfd, true, &sc);
  free(sc.entries);
  close(dfd);
}

static bool write_bytes(const char *path, const void *data, size_t len) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  bool ok = tpk_write_all(fd, data, len);
  return close(fd) == 0 && ok;
}

/* dlopens the shared object `bytes` and finds c's entries in it (into fns
 * and ws, one each). The bytes go
 * to a memfd; where memfds or /proc are missing, dlopen reads `file`, a
 * private file holding them, or a private copy made for the purpose. On
 * LOAD_FAILED, why gets the loader's message. */
static Load load_bytes(const TpkJit *j, const unsigned char *bytes, size_t len, const char *file, const TpkCode *c,
                       void **handle, TpkKernelFn *fns, TpkWorkspaceFn *ws, char *why, size_t whylen) {
  void *h = NULL;
  bool tried = false;
  int mfd = memfd_create("tpk-kernel", MFD_CLOEXEC);
  if (mfd >= 0 && tpk_write_all(mfd, bytes, len)) {
    /* dlopen hands back an already loaded object whose name matches, and
     * an earlier build loaded through a descriptor of the same number
     * (closed since) has that name: use a number whose name is free. */
    char fdpath[64];
    int fd = mfd, alt = -1;
    for (int tries = 0; fd >= 0; tries++) {
      snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", fd);
      void *taken = dlopen(fdpath, RTLD_LOCAL | RTLD_NOW | RTLD_NOLOAD);
      if (!taken) break;
      dlclose(taken);
      int next = tries < 64 ? fcntl(mfd, F_DUPFD_CLOEXEC, fd + 1) : -1;
      if (alt >= 0) close(alt);
      fd = alt = next;
    }
    if (fd >= 0 && access(fdpath, F_OK) == 0) {
      tried = true;
      h = dlopen(fdpath, RTLD_LOCAL | RTLD_NOW);
    }
    if (alt >= 0) close(alt);
  }
  if (mfd >= 0) close(mfd);
  char *dir = NULL, *copy = NULL;
  if (!tried && !file) {
    dir = make_build_dir(j, j->build_in_cache ? j->cache_dir : j->tmp_root);
    copy = dir ? tpk_path_join(dir, "kernel.so") : NULL;
    if (copy && write_bytes(copy, bytes, len)) file = copy;
  }
  if (!tried && file) {
    tried = true;
    h = dlopen(file, RTLD_LOCAL | RTLD_NOW);
  }
  Load res = LOAD_FAILED;
  if (!h) {
    const char *e = tried ? dlerror() : NULL;
    snprintf(why, whylen, "%s", e ? e : "no private copy could be made to load");
  } else {
    res = LOAD_OK;
    for (int i = 0; i < c->nentries && res == LOAD_OK; i++) {
      void *sym = dlsym(h, c->entries[i]);
      char ws_name[256];
      snprintf(ws_name, sizeof ws_name, "%s_workspace", c->entries[i]);
      void *wsym = sym ? dlsym(h, ws_name) : NULL;
      if (!sym) res = LOAD_NO_ENTRY;
      else fns[i] = as_kernel(sym);
      ws[i] = NULL;
      if (wsym) memcpy(&ws[i], &wsym, sizeof wsym);
    }
    if (res == LOAD_OK) *handle = h;
    else dlclose(h);
  }
  if (dir) remove_build_dir(dir);
  free(dir);
  free(copy);
  return res;
}

/* Reads entry <key><suffix> of the cache folder when it authenticates: its
 * body (heap) and length, the trailer left out, and the entry touched (most
 * recently used). One that does not (planted, damaged, another key's,
 * another kernel's renamed) is rejected, and removed when we may. */
static Lookup read_entry(TpkJit *j, const char *key, const char *suffix, unsigned char **body, size_t *len) {
  *body = NULL;
  char name[72];
  entry_name(key, suffix, name);
  char *path = tpk_path_join(j->cache_dir, name);
  if (!path) return LOOKUP_MISS;
  Lookup res = LOOKUP_MISS;
  unsigned char *buf = NULL;
  struct stat st;
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP) { /* a symlink never authenticates */
      unlink(path);
      res = LOOKUP_REJECTED;
    }
    goto done;
  }
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) goto done; /* a folder there: the store will say so */
  if (st.st_size <= TRAILER_LEN || st.st_size > MAX_CACHE_FILE) {
    res = LOOKUP_REJECTED;
  } else if ((buf = malloc((size_t)st.st_size))) {
    size_t n = (size_t)st.st_size - TRAILER_LEN;
    unsigned char mac[32];
    bool authentic = read_all(fd, buf, (size_t)st.st_size);
    if (authentic) {
      entry_mac(j, suffix == code_suffix ? key : name, buf, n, mac);
      authentic = memcmp(buf + n, trailer_magic, 8) == 0 && same_mac(buf + n + 8, mac);
    }
    res = authentic ? LOOKUP_HIT : LOOKUP_REJECTED;
    if (authentic) *body = buf, *len = n, buf = NULL;
  }
  if (res == LOOKUP_REJECTED) remove_if_same(path, &st);
  if (res == LOOKUP_HIT) futimens(fd, NULL); /* most recently used; may fail on another user's entry */
done:
  if (fd >= 0) close(fd);
  free(buf);
  free(path);
  return res;
}

/* Loads c's code entry (c->key) and finds c's entries in it, when the
 * entry authenticates: c is then built, tier cc. */
static Lookup cache_load(TpkJit *j, TpkCode *c) {
  unsigned char *body;
  size_t len;
  Lookup res = read_entry(j, c->key, code_suffix, &body, &len);
  char why[256];
  void *h = NULL;
  TpkKernelFn *fns = res == LOOKUP_HIT ? calloc((size_t)c->nentries, sizeof *fns) : NULL;
  TpkWorkspaceFn *ws = fns ? calloc((size_t)c->nentries, sizeof *ws) : NULL;
  /* an authentic build without an entry (compile reports it), or a load
   * that failed here: a miss, which a rebuild replaces */
  if (res == LOOKUP_HIT && (!ws || load_bytes(j, body, len, NULL, c, &h, fns, ws, why, sizeof why) != LOAD_OK))
    res = LOOKUP_MISS;
  if (res == LOOKUP_HIT) {
    atomic_fetch_add(&j->n_hits, 1);
    c->dl = h;
    for (int i = 0; i < c->nentries; i++) {
      if (!c->workspaces[i]) c->workspaces[i] = ws[i];
      atomic_store(&c->fns[i], fns[i]);
    }
    atomic_store(&c->from_cache, true);
    atomic_store(&c->tier, TPK_TIER_CC);
  }
  free(fns);
  free(ws);
  free(body);
  return res;
}

/* The note on a build the cache folder would not take: `doing` failed
 * with errno `why`. */
static void store_failed(TpkStr *note, const char *dir, const char *doing, int why) {
  if (why == EACCES || why == EPERM || why == EROFS)
    tpk_str_printf(note, "the cache folder %s is not writable: built without the cache", dir);
  else
    tpk_str_printf(note, "the cache folder %s: %s: %s: built without the cache", dir, doing, strerror(why));
}

/* Stores `data` (a build and its trailer) as entry `key`: a temporary file
 * in the cache folder, renamed over the entry's name, so that readers see
 * a whole entry or none. On failure says why in *note. */
static bool store_entry(const TpkJit *j, const char *key, const char *suffix, const unsigned char *data, size_t len,
                        TpkStr *note) {
  char tmpl[128], name[72];
  build_name(j, tmpl, sizeof tmpl);
  entry_name(key, suffix, name);
  char *tmp = tpk_path_join(j->cache_dir, tmpl), *path = tpk_path_join(j->cache_dir, name);
  int fd = tmp && path ? mkostemp(tmp, O_CLOEXEC) : -1;
  bool ok = false;
  char doing[128];
  snprintf(doing, sizeof doing, "cannot store %s", name);
  if (fd < 0) {
    store_failed(note, j->cache_dir, doing, tmp && path ? errno : ENOMEM);
  } else {
    /* readable by whoever may enter the folder: a shared cache's users */
    ok = tpk_write_all(fd, data, len) && fchmod(fd, 0644) == 0;
    int why = errno;
    if (close(fd) != 0 && ok) {
      ok = false;
      why = errno;
    }
    if (ok && rename(tmp, path) != 0) {
      ok = false;
      why = errno;
    }
    if (!ok) {
      unlink(tmp);
      store_failed(note, j->cache_dir, doing, why);
    }
  }
  free(tmp);
  free(path);
  return ok;
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

/* Builds c's source with cc (counted in n_cc) and loads it, storing the
 * build in the cache when there is one. A build the cache does not take is
 * still loaded, with a note (heap) in *note. On failure returns false with
 * a message (heap) in *msg. */
static bool cc_build(TpkJit *j, TpkCode *c, bool tracked, char **msg, char **note) {
  *msg = *note = NULL;
  TpkStr m = {0}, n = {0};
  bool store = j->cache_dir != NULL;
  char *dir = NULL;
  if (store && j->build_in_cache && !(dir = make_build_dir(j, j->cache_dir))) {
    store_failed(&n, j->cache_dir, "cannot make a build folder", errno);
    store = false;
  }
  if (!dir) {
    tidy_tmp_once(j);
    if (!(dir = make_build_dir(j, j->tmp_root))) {
      tpk_str_printf(&m, "cc: cannot create a build folder in %s: %s", j->tmp_root, strerror(errno));
      tpk_str_free(&n);
      *msg = tpk_str_take(&m);
      return false;
    }
  }
  char *hdr = tpk_path_join(dir, "tpk_prims.h"), *src = tpk_path_join(dir, "kernel.c");
  char *so = tpk_path_join(dir, "kernel.so"), *log = tpk_path_join(dir, "cc.log");
  char **argv = NULL, **env = NULL;
  unsigned char *bytes = NULL;
  TpkKernelFn *fns = NULL;
  TpkWorkspaceFn *ws = NULL;
  size_t nargs = 0;
  while (j->cc_argv[nargs]) nargs++;
  argv = calloc(nargs + 5, sizeof *argv);
  bool ok = false;
  if (!hdr || !src || !so || !log || !argv) {
    tpk_str_puts(&m, "cc: out of memory");
    goto done;
  }
  if (!write_bytes(hdr, tpk_jit_prims_h, strlen(tpk_jit_prims_h)) || !write_bytes(src, c->source, strlen(c->source))) {
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
  /* The build's bytes, with room for the trailer. */
  int fd = open(so, O_RDONLY | O_CLOEXEC);
  struct stat st;
  size_t size = 0;
  if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size > 0 && st.st_size <= MAX_CACHE_FILE - TRAILER_LEN) {
    size = (size_t)st.st_size;
    if ((bytes = malloc(size + TRAILER_LEN)) && !read_all(fd, bytes, size)) {
      free(bytes);
      bytes = NULL;
    }
  }
  if (fd >= 0) close(fd);
  if (!bytes) {
    tpk_str_printf(&m, "cc: cannot read the build of '%s' (%s)", c->entries[0], so);
    goto done;
  }
  if (store) {
    memcpy(bytes + size, trailer_magic, 8);
    entry_mac(j, c->key, bytes, size, bytes + size + 8);
    if (store_entry(j, c->key, code_suffix, bytes, size + TRAILER_LEN, &n)) tidy_cache(j);
  }
  void *h = NULL;
  fns = calloc((size_t)c->nentries, sizeof *fns);
  ws = calloc((size_t)c->nentries, sizeof *ws);
  char why[256];
  Load loaded = fns && ws ? load_bytes(j, bytes, size, so, c, &h, fns, ws, why, sizeof why) : LOAD_FAILED;
  if (loaded != LOAD_OK) {
    tpk_str_printf(&m, "cc: cannot load the build of '%s': %s", c->entries[0],
                   loaded == LOAD_NO_ENTRY ? "no such function" : fns && ws ? why : "out of memory");
    goto done;
  }
  c->dl = h;
  for (int i = 0; i < c->nentries; i++) {
    if (!c->workspaces[i]) c->workspaces[i] = ws[i]; /* a promotion keeps tcc's: the same function */
    atomic_store(&c->fns[i], fns[i]);
  }
  atomic_store(&c->tier, TPK_TIER_CC);
  ok = true;
done:
  remove_build_dir(dir);
  free(dir);
  free(hdr);
  free(src);
  free(so);
  free(log);
  free(argv);
  free(bytes);
  free(fns);
  free(ws);
  free_env(env);
  if (ok) {
    tpk_str_free(&m);
    if (n.len) *note = tpk_str_take(&n);
  } else {
    *msg = tpk_str_take(&m);
  }
  tpk_str_free(&n);
  return ok;
}

/* ---- Background worker ------------------------------------------------------ */

static void promote(TpkJit *j, TpkCode *c) {
  Lookup found = j->cache_dir ? cache_load(j, c) : LOOKUP_MISS;
  if (found == LOOKUP_REJECTED) atomic_fetch_add(&j->n_rejects, 1);
  if (found == LOOKUP_HIT) return; /* another process built it meanwhile */
  char *msg;
  if (cc_build(j, c, true, &msg, &c->cc_note)) return; /* cc_note is read once promo is PROMO_DONE */
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
    /* a code whose users all let go (evicted) is not worth a build */
    if (atomic_load(&c->refs) > 1) promote(j, c);
    pthread_mutex_lock(&j->mu);
    atomic_store(&c->promo, PROMO_DONE);
    pthread_cond_broadcast(&j->done_cv);
    pthread_mutex_unlock(&j->mu);
    tpk_code_release(c); /* the worker's reference */
    pthread_mutex_lock(&j->mu);
  }
  /* Cancelled: what is still queued keeps its tcc entry. */
  TpkCode *queued = j->qhead;
  for (TpkCode *c = queued; c; c = c->qnext) atomic_store(&c->promo, PROMO_DONE);
  j->qhead = j->qtail = NULL;
  pthread_cond_broadcast(&j->done_cv);
  pthread_mutex_unlock(&j->mu);
  for (TpkCode *c = queued, *next; c; c = next) {
    next = c->qnext;
    tpk_code_release(c);
  }
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
    atomic_fetch_add(&c->refs, 1); /* the worker's, until it is done with c */
    c->qnext = NULL;
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
  for (int i = 0; c->entries && i < c->nentries; i++) free(c->entries[i]);
  free(c->entries);
  free(c->fns);
  free(c->workspaces);
  free(c->cc_error);
  free(c->note);
  free(c->cc_note);
  free(c);
}

/* A new code for entries[0..n) (one reference, the caller's), not yet
 * listed. */
static TpkCode *new_code(TpkJit *j, const char *source, const char *const *entries, int n) {
  TpkCode *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->jit = j;
  c->source = source ? dup_str(source) : NULL;
  c->entries = calloc((size_t)n, sizeof *c->entries);
  c->fns = calloc((size_t)n, sizeof *c->fns);
  c->workspaces = calloc((size_t)n, sizeof *c->workspaces);
  bool ok = (!source || c->source) && c->entries && c->fns && c->workspaces;
  for (int i = 0; ok && i < n; i++) {
    ok = (c->entries[i] = dup_str(entries[i])) != NULL;
    c->nentries = i + 1;
    atomic_init(&c->fns[i], NULL);
  }
  atomic_init(&c->tier, (int)TPK_TIER_TCC);
  atomic_init(&c->calls, 0);
  atomic_init(&c->promo, PROMO_NONE);
  atomic_init(&c->from_cache, false);
  atomic_init(&c->refs, 1);
  if (!ok) {
    free_code(c);
    return NULL;
  }
  return c;
}

/* c, built, among the codes of its JIT. */
static void list_code(TpkJit *j, TpkCode *c) {
  pthread_mutex_lock(&j->mu);
  c->prev = NULL;
  c->next = j->codes;
  if (j->codes) j->codes->prev = c;
  j->codes = c;
  j->ncodes++;
  pthread_mutex_unlock(&j->mu);
}

static bool valid_entries(const char *const *entries, int n) {
  if (!entries || n < 1) return false;
  for (int i = 0; i < n; i++)
    if (!entries[i] || !*entries[i]) return false;
  return true;
}

/* tpk_jit_compile_all, with the cache entry named by key[0..nwords) when
 * key is given, else by the source. */
static TpkStatus compile(TpkJit *j, const uint64_t *key, int nwords, const char *source, const char *const *entries,
                         int n, TpkCode **out, TpkError *err) {
  *out = NULL;
  if (!j || !source || !valid_entries(entries, n)) return tpk_error(err, TPK_ERR_INVALID, "tpk_jit_compile: missing argument");
  TpkCode *c = new_code(j, source, entries, n);
  if (!c) return tpk_error(err, TPK_ERR_NOMEM, "out of memory compiling kernel '%s'", entries[0]);
  bool loaded = false;
  if (j->cache_dir) { /* never with the tcc tier */
    if (key) keyed_code_key(j, key, nwords, c->entries, n, c->key);
    else cache_key(j, source, c->key);
    Lookup found = cache_load(j, c);
    if (found == LOOKUP_HIT) {
      loaded = true;
    } else {
      atomic_fetch_add(&j->n_misses, 1);
      if (found == LOOKUP_REJECTED) atomic_fetch_add(&j->n_rejects, 1);
    }
  } else if (j->cache_note && !(c->note = dup_str(j->cache_note))) {
    free_code(c);
    return tpk_error(err, TPK_ERR_NOMEM, "out of memory compiling kernel '%s'", entries[0]);
  }
  if (!loaded && j->tier == TPK_TIER_CC) {
    char *msg, *note;
    bool built = cc_build(j, c, false, &msg, &note);
    if (note) { /* the cache is in use, so there is no note yet */
      free(c->note);
      c->note = note;
    }
    if (!built) {
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
  list_code(j, c);
  if (j->tier == TPK_TIER_AUTO && !loaded && j->hot_calls == 0) enqueue(j, c);
  *out = c;
  return TPK_OK;
}

TpkStatus tpk_jit_compile(TpkJit *j, const char *source, const char *entry, TpkCode **out, TpkError *err) {
  return compile(j, NULL, 0, source, &entry, 1, out, err);
}

TpkStatus tpk_jit_compile_keyed(TpkJit *j, const uint64_t *key, int nwords, const char *source, const char *entry,
                                TpkCode **out, TpkError *err) {
  return compile(j, key, nwords, source, &entry, 1, out, err);
}

TpkStatus tpk_jit_compile_all(TpkJit *j, const uint64_t *key, int nwords, const char *source,
                              const char *const *entries, int n, TpkCode **out, TpkError *err) {
  return compile(j, key, nwords, source, entries, n, out, err);
}

void tpk_jit_load_all(TpkJit *j, const uint64_t *key, int nwords, const char *const *entries, int n, TpkCode **out) {
  *out = NULL;
  if (!j->cache_dir || !valid_entries(entries, n)) return;
  TpkCode *c = new_code(j, NULL, entries, n);
  if (!c) return;
  keyed_code_key(j, key, nwords, c->entries, n, c->key);
  Lookup found = cache_load(j, c);
  if (found == LOOKUP_REJECTED) atomic_fetch_add(&j->n_rejects, 1);
  if (found != LOOKUP_HIT) {
    free_code(c);
    return;
  }
  atomic_store(&c->promo, PROMO_DONE);
  list_code(j, c);
  *out = c;
}

void tpk_jit_load(TpkJit *j, const uint64_t *key, int nwords, const char *entry, TpkCode **out) {
  tpk_jit_load_all(j, key, nwords, &entry, 1, out);
}

void tpk_code_retain(TpkCode *c) { atomic_fetch_add(&c->refs, 1); }

void tpk_code_release(TpkCode *c) {
  if (!c || atomic_fetch_sub(&c->refs, 1) != 1) return;
  TpkJit *j = c->jit;
  pthread_mutex_lock(&j->mu);
  if (c->prev) c->prev->next = c->next;
  else j->codes = c->next;
  if (c->next) c->next->prev = c->prev;
  j->ncodes--;
  pthread_mutex_unlock(&j->mu);
  free_code(c);
}

int tpk_code_entries(const TpkCode *c) { return c->nentries; }

TpkWorkspaceFn tpk_code_workspace(const TpkCode *c) { return c->workspaces[0]; }
TpkWorkspaceFn tpk_code_workspace_at(const TpkCode *c, int i) { return c->workspaces[i]; }

TpkKernelFn tpk_code_entry_at(TpkCode *c, int i) {
  TpkKernelFn fn = atomic_load_explicit(&c->fns[i], memory_order_acquire);
  if (atomic_load_explicit(&c->promo, memory_order_relaxed) == PROMO_NONE && c->jit->tier == TPK_TIER_AUTO) {
    /* Exactly one caller sees the count reach hot_calls (calls of any
     * entry: the code is promoted whole). */
    if (atomic_fetch_add_explicit(&c->calls, 1, memory_order_relaxed) + 1 == c->jit->hot_calls) enqueue(c->jit, c);
  }
  return fn;
}

TpkKernelFn tpk_code_entry(TpkCode *c) { return tpk_code_entry_at(c, 0); }

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

bool tpk_code_from_cache(const TpkCode *c) { return atomic_load(&((TpkCode *)c)->from_cache); }

const char *tpk_code_note(const TpkCode *c) {
  if (atomic_load(&((TpkCode *)c)->promo) == PROMO_DONE && c->cc_note) return c->cc_note;
  return c->note;
}

TpkJitStats tpk_jit_stats(const TpkJit *j) {
  TpkJit *m = (TpkJit *)j; /* atomic loads on a const object predate C17 */
  pthread_mutex_lock(&m->mu);
  int live = m->ncodes;
  pthread_mutex_unlock(&m->mu);
  return (TpkJitStats){atomic_load(&m->n_tcc),     atomic_load(&m->n_cc),     atomic_load(&m->n_hits),
                       atomic_load(&m->n_cc_fail), atomic_load(&m->n_misses), atomic_load(&m->n_rejects),
                       live};
}

/* ---- Units ---------------------------------------------------------------------- */

char *tpk_jit_unit_load(TpkJit *j, const uint64_t *key, int nwords, size_t *len) {
  if (!j->cache_dir) return NULL;
  char stem[65];
  unit_key(key, nwords, stem);
  unsigned char *body;
  Lookup found = read_entry(j, stem, unit_suffix, &body, len);
  if (found == LOOKUP_REJECTED) atomic_fetch_add(&j->n_rejects, 1);
  if (found != LOOKUP_HIT) return NULL;
  body[*len] = 0; /* over the trailer, checked and done with */
  return (char *)body;
}

void tpk_jit_unit_store(TpkJit *j, const uint64_t *key, int nwords, const void *bytes, size_t len) {
  if (!j->cache_dir || len > MAX_CACHE_FILE - TRAILER_LEN) return;
  char stem[65], name[72];
  unit_key(key, nwords, stem);
  entry_name(stem, unit_suffix, name);
  unsigned char *data = malloc(len + TRAILER_LEN);
  if (!data) return;
  memcpy(data, bytes, len);
  memcpy(data + len, trailer_magic, 8);
  entry_mac(j, name, data, len, data + len + 8);
  TpkStr note = {0}; /* a unit not kept is built again: nobody needs to hear why */
  if (store_entry(j, stem, unit_suffix, data, len + TRAILER_LEN, &note)) tidy_cache(j);
  tpk_str_free(&note);
  free(data);
}

TpkStatus tpk_jit_cache_info(TpkJit *j, TpkJitCacheInfo *out, TpkError *err) {
  *out = (TpkJitCacheInfo){.dir = j->cache_path, .in_use = j->cache_dir != NULL, .note = j->cache_note,
                           .key_file = j->key_file, .max_bytes = j->cache_max};
  if (j->cache_path && j->tier == TPK_TIER_TCC) out->note = "TPK_TIER=tcc compiles with tcc only, which the cache does not keep";
  if (!j->cache_path) return TPK_OK;
  int dfd = open(j->cache_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    if (errno == ENOENT) return TPK_OK;
    return tpk_error(err, TPK_ERR_IO, "cannot read the cache folder %s: %s", j->cache_path, strerror(errno));
  }
  Scan sc = {0};
  bool ok = scan_folder(j, dfd, false, &sc);
  int why = errno;
  close(dfd);
  free(sc.entries);
  if (!ok) return tpk_error(err, TPK_ERR_IO, "cannot read the cache folder %s: %s", j->cache_path, strerror(why));
  out->entries = (int64_t)sc.n;
  out->bytes = sc.bytes;
  out->build_folders = sc.builds;
  return TPK_OK;
}

TpkStatus tpk_jit_cache_clear(TpkJit *j, int64_t *entries_removed, int64_t *builds_removed, TpkError *err) {
  *entries_removed = *builds_removed = 0;
  if (!j->cache_path)
    return tpk_error(err, TPK_ERR_INVALID, "there is no cache folder (TPK_CACHE_DIR is empty, or no home is known)");
  int lock;
  int dfd = lock_folder(j->cache_path, &lock);
  if (dfd < 0) {
    if (errno == ENOENT) return TPK_OK;
    return tpk_error(err, TPK_ERR_IO, "cannot open the cache folder %s: %s", j->cache_path, strerror(errno));
  }
  Scan sc = {0};
  bool ok = scan_folder(j, dfd, true, &sc);
  int why = ok ? 0 : errno;
  int64_t kept = 0;
  for (size_t i = 0; i < sc.n; i++) {
    if (unlinkat(dfd, sc.entries[i].name, 0) == 0) {
      (*entries_removed)++;
    } else if (errno != ENOENT) {
      kept++;
      why = errno;
    }
  }
  *builds_removed = sc.stale_removed;
  free(sc.entries);
  unlock_folder(dfd, lock);
  if (!ok) return tpk_error(err, TPK_ERR_IO, "cannot read the cache folder %s: %s", j->cache_path, strerror(why));
  if (kept)
    return tpk_error(err, TPK_ERR_IO, "%lld entries of the cache folder %s could not be removed: %s", (long long)kept,
                     j->cache_path, strerror(why));
  return TPK_OK;
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
  free(j->cache_path);
  free(j->cache_dir);
  free(j->cache_note);
  free(j->key_file);
  free(j->tmp_root);
  free(j->tcc_lib);
  free(j);
}
