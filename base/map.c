/*
 * map.c — hashing, the pointer map and the string set (base.h): the one
 * open-addressing table of each kind that every folder uses.
 *
 * Tables are powers of two, at most half full, probed linearly. Growing a
 * table on the heap frees the old one; in an arena the old one stays there
 * until the arena goes (a table at most doubles what it already used).
 */
#include "base/base.h"

#include <stdlib.h>
#include <string.h>

/* ---- Hashing ------------------------------------------------------------------- */

uint64_t tpk_hash_add(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * UINT64_C(1099511628211);
  return h;
}

uint64_t tpk_hash_bytes(const void *data, size_t n) { return tpk_hash_add(TPK_HASH_SEED, data, n); }

uint64_t tpk_splitmix64(uint64_t *state) {
  uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

/* cap zeroed entries of `size` bytes, from the arena or the heap. */
static void *table_alloc(TpkArena *arena, size_t cap, size_t size) {
  return arena ? tpk_arena_alloc(arena, cap * size) : calloc(cap, size);
}

static void table_release(TpkArena *arena, void *p) {
  if (!arena) free(p);
}

/* ---- Pointer map ------------------------------------------------------------------ */

static size_t ptrmap_slot(const TpkPtrMap *m, const void *key) {
  size_t i = (size_t)tpk_hash_mix((uint64_t)(uintptr_t)key) & (m->cap - 1);
  while (m->keys[i] && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
  return i;
}

bool tpk_ptrmap_put(TpkPtrMap *m, const void *key, void *val) {
  if ((m->count + 1) * 2 > m->cap) {
    size_t cap = m->cap ? m->cap * 2 : 64;
    const void **keys = table_alloc(m->arena, cap, sizeof *keys);
    void **vals = table_alloc(m->arena, cap, sizeof *vals);
    if (!keys || !vals) {
      table_release(m->arena, keys);
      table_release(m->arena, vals);
      return false;
    }
    TpkPtrMap old = *m;
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;
    for (size_t i = 0; i < old.cap; i++)
      if (old.keys[i]) {
        size_t s = ptrmap_slot(m, old.keys[i]);
        m->keys[s] = old.keys[i];
        m->vals[s] = old.vals[i];
      }
    table_release(m->arena, old.keys);
    table_release(m->arena, old.vals);
  }
  size_t s = ptrmap_slot(m, key);
  if (!m->keys[s]) m->count++;
  m->keys[s] = key;
  m->vals[s] = val;
  return true;
}

bool tpk_ptrmap_get(const TpkPtrMap *m, const void *key, void **val) {
  if (!m->cap) return false;
  size_t s = ptrmap_slot(m, key);
  if (!m->keys[s]) return false;
  if (val) *val = m->vals[s];
  return true;
}

void tpk_ptrmap_free(TpkPtrMap *m) {
  table_release(m->arena, m->keys);
  table_release(m->arena, m->vals);
  *m = (TpkPtrMap){.arena = m->arena};
}

/* ---- String set ------------------------------------------------------------------- */

static size_t strset_slot(const TpkStrSet *s, const char *key, size_t n) {
  size_t i = (size_t)tpk_hash_bytes(key, n) & (s->cap - 1);
  while (s->keys[i] && !(strncmp(s->keys[i], key, n) == 0 && s->keys[i][n] == 0)) i = (i + 1) & (s->cap - 1);
  return i;
}

bool tpk_strset_has(const TpkStrSet *s, const char *key, size_t n) {
  return s->cap && s->keys[strset_slot(s, key, n)] != NULL;
}

const char *tpk_strset_add(TpkStrSet *s, const char *key, size_t n) {
  if ((s->count + 1) * 2 > s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 64;
    const char **keys = tpk_arena_alloc(s->arena, cap * sizeof *keys);
    if (!keys) return NULL;
    TpkStrSet old = *s;
    s->keys = keys;
    s->cap = cap;
    for (size_t i = 0; i < old.cap; i++)
      if (old.keys[i]) s->keys[strset_slot(s, old.keys[i], strlen(old.keys[i]))] = old.keys[i];
  }
  size_t i = strset_slot(s, key, n);
  if (!s->keys[i]) {
    char *copy = tpk_arena_strndup(s->arena, key, n);
    if (!copy) return NULL;
    s->keys[i] = copy;
    s->count++;
  }
  return s->keys[i];
}
