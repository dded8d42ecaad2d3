/*
 * map.h — two small open-addressing tables the IR tools share (not part of
 * ir.h): a pointer map (value -> name, value -> state)
 * and a string set (names already printed). Storage comes from an arena the
 * caller owns, so a failed allocation only sets `failed`; nothing is freed.
 */
#ifndef TPK_IRHASH_H
#define TPK_IRHASH_H

#include <string.h>

#include "base/base.h"

static inline uint64_t irh_mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

static inline uint64_t irh_bytes(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ULL; /* FNV-1a */
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
  return h;
}

/* ---- pointer -> pointer ---- */
typedef struct IrhMap {
  TpkArena *arena;
  const void **keys;
  void **vals;
  size_t cap, n;
  bool failed;
} IrhMap;

static inline void irh_map_init(IrhMap *m, TpkArena *arena) {
  memset(m, 0, sizeof *m);
  m->arena = arena;
}

static inline size_t irh_map_slot(const IrhMap *m, const void *key) {
  size_t i = (size_t)irh_mix((uint64_t)(uintptr_t)key) & (m->cap - 1);
  while (m->keys[i] && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
  return i;
}

static inline void *irh_map_get(const IrhMap *m, const void *key) {
  if (!m->cap) return NULL;
  size_t i = irh_map_slot(m, key);
  return m->keys[i] ? m->vals[i] : NULL;
}

static inline bool irh_map_put(IrhMap *m, const void *key, void *val) {
  if ((m->n + 1) * 4 >= m->cap * 3) {
    size_t cap = m->cap ? m->cap * 2 : 64;
    const void **keys = tpk_arena_alloc(m->arena, cap * sizeof *keys);
    void **vals = tpk_arena_alloc(m->arena, cap * sizeof *vals);
    if (!keys || !vals) {
      m->failed = true;
      return false;
    }
    IrhMap old = *m;
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;
    for (size_t i = 0; i < old.cap; i++)
      if (old.keys[i]) {
        size_t j = irh_map_slot(m, old.keys[i]);
        m->keys[j] = old.keys[i];
        m->vals[j] = old.vals[i];
      }
  }
  size_t i = irh_map_slot(m, key);
  if (!m->keys[i]) m->n++;
  m->keys[i] = key;
  m->vals[i] = val;
  return true;
}

/* ---- set of strings (copied into the arena) ---- */
typedef struct IrhStrSet {
  TpkArena *arena;
  const char **keys;
  size_t cap, n;
  bool failed;
} IrhStrSet;

static inline size_t irh_set_slot(const IrhStrSet *s, const char *key, size_t n) {
  size_t i = (size_t)irh_bytes(key, n) & (s->cap - 1);
  while (s->keys[i] && !(strncmp(s->keys[i], key, n) == 0 && s->keys[i][n] == 0)) i = (i + 1) & (s->cap - 1);
  return i;
}

static inline bool irh_set_has(const IrhStrSet *s, const char *key, size_t n) {
  return s->cap && s->keys[irh_set_slot(s, key, n)] != NULL;
}

/* Returns the stored copy, or NULL when out of memory. */
static inline const char *irh_set_add(IrhStrSet *s, const char *key, size_t n) {
  if ((s->n + 1) * 4 >= s->cap * 3) {
    size_t cap = s->cap ? s->cap * 2 : 64;
    const char **keys = tpk_arena_alloc(s->arena, cap * sizeof *keys);
    if (!keys) {
      s->failed = true;
      return NULL;
    }
    IrhStrSet old = *s;
    s->keys = keys;
    s->cap = cap;
    for (size_t i = 0; i < old.cap; i++)
      if (old.keys[i]) s->keys[irh_set_slot(s, old.keys[i], strlen(old.keys[i]))] = old.keys[i];
  }
  size_t i = irh_set_slot(s, key, n);
  if (!s->keys[i]) {
    char *copy = tpk_arena_strndup(s->arena, key, n);
    if (!copy) {
      s->failed = true;
      return NULL;
    }
    s->keys[i] = copy;
    s->n++;
  }
  return s->keys[i];
}

#endif
