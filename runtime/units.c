/*
 * units.c — the context's cache of compiled units, in memory: the one
 * cache every entrance shares (tpk.h, "The compilation cache").
 *
 * A unit is anything compiling made that a later request can take as it is:
 * a kernel's code serving every shape, a kernel's specialisation for one
 * device, sizes and tunables, a compiled graph, an eager window's compiled
 * graph. Its key is words the caller builds (the IR's 128-bit structural
 * hash first, then what else sets the code apart: sizes or their symbolic
 * form, tunables, the device).
 *
 * On disk. A kind of unit whose payload can be written out has a codec
 * (TpkUnitCodec): a request that misses in memory then looks in the cache
 * folder under the same key (host/jit.h, units: authenticated, tpk's build
 * in the key) and, when the bytes there make a payload, publishes it at
 * once, as a hit; a unit of such a kind that is built is written there
 * when it is published. Compiled code is not a unit's bytes (cc builds it
 * later, in the background): the JIT keeps it under a key of its own,
 * which the runtime derives from the unit's (runtime.c).
 *
 * Units are reference counted: the cache holds one, and so does whoever
 * uses one, so a unit the cache lets go of (least recently used first, once
 * it holds more than its limit) lives until its last user is done. A
 * request for a key nobody has built claims it: the caller builds the unit
 * and publishes it (tpk_unit_ready) or gives up (tpk_unit_abandon), while
 * other requests for the key wait, so two threads never compile the same
 * thing. Building a unit may request others (a specialisation its kernel's
 * code), never one that waits on it.
 */
#include "runtime/internal.h"
#include "host/jit.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct TpkUnit {
  uint64_t hash; /* of the key */
  int nwords;
  uint64_t *key;
  atomic_int refs;       /* the cache's (while listed), and each user's */
  bool ready;            /* built and published (under the cache's lock) */
  bool listed;           /* in the table and the LRU list */
  void *payload;
  void (*destroy)(void *payload);
  const TpkUnitCodec *codec; /* set while being built: written to disk when published */
  TpkUnit *chain;        /* the table's bucket */
  TpkUnit *newer, *older; /* the LRU list, most recent first */
};

struct TpkUnits {
  TpkContext *ctx;      /* its disk: the JIT's cache folder */
  pthread_mutex_t lock;
  pthread_cond_t built; /* a unit was published or abandoned */
  TpkUnit **table;
  size_t cap;           /* buckets, a power of two */
  int64_t count, max;
  TpkUnit *newest, *oldest;
  int64_t hits[3], misses[3], loads[3];
};

TpkUnits *tpk_units_new(int64_t max, TpkContext *ctx) {
  TpkUnits *u = calloc(1, sizeof *u);
  if (!u) return NULL;
  u->ctx = ctx;
  u->cap = 256;
  u->table = calloc(u->cap, sizeof *u->table);
  if (!u->table) {
    free(u);
    return NULL;
  }
  u->max = max > 0 ? max : 1;
  pthread_mutex_init(&u->lock, NULL);
  pthread_cond_init(&u->built, NULL);
  return u;
}

static void unit_free(TpkUnit *unit) {
  if (unit->destroy) unit->destroy(unit->payload);
  free(unit->key);
  free(unit);
}

void tpk_unit_release(TpkUnit *unit) {
  if (unit && atomic_fetch_sub(&unit->refs, 1) == 1) unit_free(unit);
}

void tpk_unit_retain(TpkUnit *unit) { atomic_fetch_add(&unit->refs, 1); }

void *tpk_unit_payload(const TpkUnit *unit) { return unit->payload; }

const uint64_t *tpk_unit_key(const TpkUnit *unit, int *nwords) {
  *nwords = unit->nwords;
  return unit->key;
}

static uint64_t key_hash(const uint64_t *key, int n) {
  uint64_t h = TPK_HASH_SEED;
  for (int i = 0; i < n; i++) h = tpk_hash_mix(h ^ key[i]);
  return h;
}

/* Out of the table and the list; the caller drops the cache's hold. Under the lock. */
static void unlist(TpkUnits *u, TpkUnit *unit) {
  TpkUnit **p = &u->table[unit->hash & (u->cap - 1)];
  while (*p != unit) p = &(*p)->chain;
  *p = unit->chain;
  if (unit->newer) unit->newer->older = unit->older;
  else u->newest = unit->older;
  if (unit->older) unit->older->newer = unit->newer;
  else u->oldest = unit->newer;
  unit->newer = unit->older = unit->chain = NULL;
  unit->listed = false;
  u->count--;
}

static void make_newest(TpkUnits *u, TpkUnit *unit) {
  if (u->newest == unit) return;
  if (unit->newer) unit->newer->older = unit->older;
  if (unit->older) unit->older->newer = unit->newer;
  else if (u->oldest == unit) u->oldest = unit->newer;
  unit->older = u->newest;
  unit->newer = NULL;
  if (u->newest) u->newest->newer = unit;
  u->newest = unit;
  if (!u->oldest) u->oldest = unit;
}

/* Doubles the table when it is as full as it has buckets. Under the lock. */
static void grow(TpkUnits *u) {
  if ((size_t)u->count < u->cap) return;
  TpkUnit **table = calloc(u->cap * 2, sizeof *table);
  if (!table) return; /* longer chains, still correct */
  for (size_t i = 0; i < u->cap; i++)
    for (TpkUnit *x = u->table[i], *next; x; x = next) {
      next = x->chain;
      TpkUnit **b = &table[x->hash & (u->cap * 2 - 1)];
      x->chain = *b;
      *b = x;
    }
  free(u->table);
  u->table = table;
  u->cap *= 2;
}

/* The oldest published units beyond the limit, unlisted; the caller
 * releases them outside the lock (a payload's destroy may take locks). */
static TpkUnit *evict(TpkUnits *u) {
  TpkUnit *gone = NULL;
  for (TpkUnit *x = u->oldest, *newer; x && u->count > u->max; x = newer) {
    newer = x->newer;
    if (!x->ready) continue; /* being built: its builder holds the claim */
    unlist(u, x);
    x->chain = gone;
    gone = x;
  }
  return gone;
}

static void release_all(TpkUnit *list) {
  for (TpkUnit *x = list, *next; x; x = next) {
    next = x->chain;
    x->chain = NULL;
    tpk_unit_release(x);
  }
}

TpkStatus tpk_units_get(TpkUnits *u, int kind, const uint64_t *key, int nwords, TpkUnit **out, bool *claimed) {
  *out = NULL;
  *claimed = false;
  uint64_t h = key_hash(key, nwords);
  size_t bytes = sizeof *key * (size_t)nwords;
  pthread_mutex_lock(&u->lock);
  for (;;) {
    TpkUnit *x = u->table[h & (u->cap - 1)];
    while (x && !(x->hash == h && x->nwords == nwords && memcmp(x->key, key, bytes) == 0)) x = x->chain;
    if (!x) break;
    if (x->ready) {
      tpk_unit_retain(x);
      make_newest(u, x);
      if (kind >= 0) u->hits[kind]++;
      pthread_mutex_unlock(&u->lock);
      *out = x;
      return TPK_OK;
    }
    /* being built: wait for it, then look again (abandoned: it is gone) */
    tpk_unit_retain(x);
    while (!x->ready && x->listed) pthread_cond_wait(&u->built, &u->lock);
    pthread_mutex_unlock(&u->lock);
    tpk_unit_release(x);
    pthread_mutex_lock(&u->lock);
  }
  TpkUnit *unit = calloc(1, sizeof *unit);
  uint64_t *copy = malloc(bytes ? bytes : 1);
  if (!unit || !copy) {
    pthread_mutex_unlock(&u->lock);
    free(unit);
    free(copy);
    return tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
  }
  memcpy(copy, key, bytes);
  unit->hash = h;
  unit->key = copy;
  unit->nwords = nwords;
  atomic_init(&unit->refs, 2); /* the cache's and the builder's */
  unit->listed = true;
  grow(u);
  TpkUnit **b = &u->table[h & (u->cap - 1)];
  unit->chain = *b;
  *b = unit;
  make_newest(u, unit);
  u->count++;
  if (kind >= 0) u->misses[kind]++;
  TpkUnit *gone = evict(u);
  pthread_mutex_unlock(&u->lock);
  release_all(gone);
  *out = unit;
  *claimed = true;
  return TPK_OK;
}

void tpk_unit_ready(TpkUnits *u, TpkUnit *unit, void *payload, void (*destroy)(void *payload)) {
  pthread_mutex_lock(&u->lock);
  unit->payload = payload;
  unit->destroy = destroy;
  unit->ready = true;
  const TpkUnitCodec *codec = unit->codec;
  unit->codec = NULL;
  pthread_cond_broadcast(&u->built);
  TpkUnit *gone = evict(u);
  pthread_mutex_unlock(&u->lock);
  release_all(gone);
  /* on disk for other processes, after the waiters here have it */
  TpkJit *jit = codec ? tpk_context_jit(u->ctx) : NULL; /* NULL too once the context ended */
  TpkStr bytes = {0};
  if (jit && codec->save(payload, &bytes) && !bytes.failed) tpk_jit_unit_store(jit, unit->key, unit->nwords, bytes.data, bytes.len);
  tpk_str_free(&bytes);
}

TpkStatus tpk_units_get_kept(TpkUnits *u, int kind, const TpkUnitCodec *codec, const uint64_t *key, int nwords,
                             TpkUnit **out, bool *claimed) {
  TpkStatus st = tpk_units_get(u, -1, key, nwords, out, claimed);
  if (st != TPK_OK || !*claimed) {
    if (st == TPK_OK && kind >= 0) tpk_units_count(u, kind, true);
    return st;
  }
  size_t len;
  TpkJit *jit = tpk_context_jit(u->ctx);
  char *bytes = jit ? tpk_jit_unit_load(jit, key, nwords, &len) : NULL;
  void *payload = bytes ? codec->load(u->ctx, bytes, len) : NULL;
  free(bytes);
  if (kind >= 0) tpk_units_count(u, kind, payload != NULL);
  if (!payload) {
    (*out)->codec = codec; /* only its builder reads it */
    return TPK_OK;
  }
  if (codec->kind >= 0) tpk_units_loaded(u, codec->kind);
  tpk_unit_ready(u, *out, payload, codec->destroy);
  *claimed = false;
  return TPK_OK;
}

void tpk_units_loaded(TpkUnits *u, int kind) {
  pthread_mutex_lock(&u->lock);
  u->loads[kind]++;
  pthread_mutex_unlock(&u->lock);
}

void tpk_unit_abandon(TpkUnits *u, TpkUnit *unit) {
  pthread_mutex_lock(&u->lock);
  bool listed = unit->listed;
  if (listed) unlist(u, unit);
  pthread_cond_broadcast(&u->built);
  pthread_mutex_unlock(&u->lock);
  if (listed) tpk_unit_release(unit); /* the cache's hold */
  tpk_unit_release(unit);             /* the builder's */
}

void tpk_units_clear(TpkUnits *u) {
  if (!u) return;
  pthread_mutex_lock(&u->lock);
  TpkUnit *gone = NULL;
  for (TpkUnit *x = u->oldest, *newer; x; x = newer) {
    newer = x->newer;
    if (!x->ready) continue; /* its builder finishes and publishes it */
    unlist(u, x);
    x->chain = gone;
    gone = x;
  }
  pthread_mutex_unlock(&u->lock);
  release_all(gone);
}

void tpk_units_free(TpkUnits *u) {
  if (!u) return;
  tpk_units_clear(u);
  pthread_cond_destroy(&u->built);
  pthread_mutex_destroy(&u->lock);
  free(u->table);
  free(u);
}

void tpk_units_count(TpkUnits *u, int kind, bool hit) {
  pthread_mutex_lock(&u->lock);
  if (hit) u->hits[kind]++;
  else u->misses[kind]++;
  pthread_mutex_unlock(&u->lock);
}

void tpk_units_stats(TpkUnits *u, int64_t *count, int64_t hits[3], int64_t misses[3], int64_t loads[3]) {
  pthread_mutex_lock(&u->lock);
  *count = u->count;
  memcpy(hits, u->hits, sizeof u->hits);
  memcpy(misses, u->misses, sizeof u->misses);
  if (loads) memcpy(loads, u->loads, sizeof u->loads);
  pthread_mutex_unlock(&u->lock);
}

int tpk_units_list(TpkUnits *u, TpkUnit **out, int max) {
  pthread_mutex_lock(&u->lock);
  int n = 0;
  for (TpkUnit *x = u->newest; x; x = x->older)
    if (x->ready) {
      if (n < max) {
        tpk_unit_retain(x);
        out[n] = x;
      }
      n++;
    }
  pthread_mutex_unlock(&u->lock);
  return n;
}
