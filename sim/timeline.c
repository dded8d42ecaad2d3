/*
 * timeline.c — event timeline of in-order hardware units, and its Chrome
 * trace writer. The model and its guarantees are described in timeline.h.
 *
 * Input: units, then tasks (unit, cycles, dependencies, label) in submission
 * order. Output: each task's start and end, computed at once when it is
 * added; per-unit busy time; a trace. Nothing is revisited later, which is
 * what keeps 10^6 tasks cheap: a task costs O(lanes + deps) time and 32
 * bytes, held in fixed-size chunks so growing never copies the tasks.
 */
#include "sim/timeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/files.h"

/* ---- Data ------------------------------------------------------------------ */

enum {
  TL_NO_UNIT = UINT16_MAX, /* TlTask.unit of a barrier */
  TASK_CHUNK_BITS = 12,    /* 4096 tasks (128 KiB) per chunk */
  TASK_CHUNK = 1 << TASK_CHUNK_BITS,
  STR_CHUNK = 64 * 1024, /* interned strings are copied into chunks this big */
  TRACE_FLUSH = 64 * 1024 /* the file writer flushes its buffer past this */
};

/* One scheduled task: what the queries and the trace need, nothing more
 * (dependencies are consumed when the task is added). */
typedef struct TlTask {
  double start;      /* cycle the task started */
  double end;        /* start + duration */
  uint32_t label;    /* interned string id; 0 is "" */
  uint32_t category; /* interned string id; 0 is "" (no category) */
  uint16_t unit;     /* unit index, TL_NO_UNIT for a barrier */
  uint16_t lane;     /* lane it ran on */
} TlTask;
_Static_assert(sizeof(TlTask) == 32, "a task is 32 bytes: millions of them are kept");

/* One hardware unit and its in-order issue state. */
typedef struct TlUnit {
  uint32_t name;     /* interned string id */
  int lanes;         /* tasks it runs at once */
  int tid_base;      /* trace thread id of lane 0; its other lanes follow */
  double *lane_free; /* per lane: when its last task ends */
  double last_start; /* start of the last task issued: in-order issue */
  double busy;       /* sum of task durations, all lanes */
  int64_t tasks;     /* tasks issued on it */
} TlUnit;

/* Chunk of interned string bytes; chunks never move, so pointers into them
 * (TpkTimelineTaskInfo.label) stay valid until destroy. */
typedef struct TlStrChunk {
  struct TlStrChunk *next; /* older chunk */
  size_t size, used;       /* bytes in data, bytes handed out */
  char data[];
} TlStrChunk;

/* Open-addressing slot of the intern table. */
typedef struct TlSlot {
  uint32_t id;   /* string id, UINT32_MAX when empty */
  uint32_t hash; /* tpk_hash_bytes of the string, so growing need not rehash text */
} TlSlot;

struct TpkTimeline {
  TpkError error;       /* first failure; code TPK_OK while none */
  int64_t fail_after;   /* test hook: allocations left before failing, -1 off */

  TlUnit *units;        /* units, in the order added */
  int nunits, units_cap;
  int next_tid;         /* trace thread id the next unit's lane 0 gets */

  TlTask **chunks;      /* task i is chunks[i >> TASK_CHUNK_BITS][i & (TASK_CHUNK-1)] */
  size_t nchunks, chunks_cap;
  int64_t ntasks;       /* ids handed out (tasks and barriers) */
  double makespan;      /* max end over all tasks */

  const char **strs;    /* string id -> text; strs[0] is "" */
  uint32_t nstrs, strs_cap;
  TlSlot *slots;        /* intern table, power-of-two size, at most half full */
  uint32_t slots_cap;
  TlStrChunk *str_chunks; /* newest first */
  size_t str_bytes;     /* bytes of all string chunks */
};

/* ---- Errors and allocation ------------------------------------------------- */

static bool tl_ok(const TpkTimeline *tl) { return tl && tl->error.code == TPK_OK; }

/* Record the first failure only: later ones are usually its consequences. */
static void tl_fail(TpkTimeline *tl, TpkStatus code, const char *fmt, ...) TPK_PRINTF(3, 4);
static void tl_fail(TpkTimeline *tl, TpkStatus code, const char *fmt, ...) {
  if (tl->error.code != TPK_OK) return;
  tl->error.code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tl->error.message, sizeof tl->error.message, fmt, ap);
  va_end(ap);
}

/* Every allocation goes through here so the test hook can refuse it. */
static void *tl_realloc(TpkTimeline *tl, void *p, size_t size) {
  if (tl->fail_after >= 0) {
    if (tl->fail_after == 0) return NULL;
    tl->fail_after--;
  }
  return realloc(p, size);
}

/* Grow an array of `*cap` elements of `elem` bytes to hold at least `need`. */
static bool tl_grow(TpkTimeline *tl, void **arr, size_t *cap, size_t need, size_t elem, const char *what) {
  if (need <= *cap) return true;
  size_t n = *cap ? *cap : 16;
  while (n < need) n *= 2;
  void *p = n <= SIZE_MAX / elem ? tl_realloc(tl, *arr, n * elem) : NULL;
  if (!p) {
    tl_fail(tl, TPK_ERR_NOMEM, "timeline: out of memory growing %s to %zu entries", what, n);
    return false;
  }
  *arr = p;
  *cap = n;
  return true;
}

/* ---- Interned strings ------------------------------------------------------ */

static bool str_table_grow(TpkTimeline *tl) {
  uint32_t cap = tl->slots_cap ? tl->slots_cap * 2 : 64;
  if (cap == 0 || cap > UINT32_MAX / 2) {
    tl_fail(tl, TPK_ERR_NOMEM, "timeline: too many distinct labels");
    return false;
  }
  TlSlot *slots = tl_realloc(tl, NULL, (size_t)cap * sizeof *slots);
  if (!slots) {
    tl_fail(tl, TPK_ERR_NOMEM, "timeline: out of memory interning labels");
    return false;
  }
  for (uint32_t i = 0; i < cap; i++) slots[i].id = UINT32_MAX;
  for (uint32_t i = 0; i < tl->slots_cap; i++) {
    if (tl->slots[i].id == UINT32_MAX) continue;
    uint32_t j = tl->slots[i].hash & (cap - 1);
    while (slots[j].id != UINT32_MAX) j = (j + 1) & (cap - 1);
    slots[j] = tl->slots[i];
  }
  free(tl->slots);
  tl->slots = slots;
  tl->slots_cap = cap;
  return true;
}

/* Copy n+1 bytes (s and its NUL) into the string chunks. */
static const char *str_copy(TpkTimeline *tl, const char *s, size_t n) {
  TlStrChunk *c = tl->str_chunks;
  if (!c || c->size - c->used < n + 1) {
    size_t size = n + 1 > STR_CHUNK ? n + 1 : STR_CHUNK;
    c = tl_realloc(tl, NULL, sizeof *c + size);
    if (!c) return NULL;
    c->size = size;
    c->used = 0;
    c->next = tl->str_chunks;
    tl->str_chunks = c;
    tl->str_bytes += sizeof *c + size;
  }
  char *p = c->data + c->used;
  memcpy(p, s, n + 1);
  c->used += n + 1;
  return p;
}

/* The id of string s (NULL and "" are 0), adding it if new; UINT32_MAX on
 * failure (recorded). */
static uint32_t str_intern(TpkTimeline *tl, const char *s) {
  if (!s || !*s) return 0;
  size_t n = strlen(s);
  uint32_t h = (uint32_t)tpk_hash_bytes(s, n);
  if (tl->slots_cap) {
    for (uint32_t j = h & (tl->slots_cap - 1);; j = (j + 1) & (tl->slots_cap - 1)) {
      TlSlot sl = tl->slots[j];
      if (sl.id == UINT32_MAX) break;
      if (sl.hash == h && strcmp(tl->strs[sl.id], s) == 0) return sl.id;
    }
  }
  if ((tl->nstrs + 1) * 2 > tl->slots_cap && !str_table_grow(tl)) return UINT32_MAX;
  size_t cap = tl->strs_cap;
  if (!tl_grow(tl, (void **)&tl->strs, &cap, (size_t)tl->nstrs + 1, sizeof *tl->strs, "the label table"))
    return UINT32_MAX;
  tl->strs_cap = (uint32_t)cap;
  const char *copy = str_copy(tl, s, n);
  if (!copy) {
    tl_fail(tl, TPK_ERR_NOMEM, "timeline: out of memory copying label \"%.40s\"", s);
    return UINT32_MAX;
  }
  uint32_t id = tl->nstrs++;
  tl->strs[id] = copy;
  uint32_t j = h & (tl->slots_cap - 1);
  while (tl->slots[j].id != UINT32_MAX) j = (j + 1) & (tl->slots_cap - 1);
  tl->slots[j] = (TlSlot){id, h};
  return id;
}

/* ---- Creating ---------------------------------------------------------------- */

TpkStatus tpk_timeline_create(TpkTimeline **out) {
  TpkTimeline *tl = calloc(1, sizeof *tl);
  *out = tl;
  if (!tl) return TPK_ERR_NOMEM;
  tl->fail_after = -1;
  tl->next_tid = 1; /* tid 0 is the process-wide row (instant events) */
  size_t cap = 0;
  if (!tl_grow(tl, (void **)&tl->strs, &cap, 1, sizeof *tl->strs, "the label table")) {
    tpk_timeline_destroy(tl);
    *out = NULL;
    return TPK_ERR_NOMEM;
  }
  tl->strs_cap = (uint32_t)cap;
  tl->strs[0] = "";
  tl->nstrs = 1;
  return TPK_OK;
}

void tpk_timeline_destroy(TpkTimeline *tl) {
  if (!tl) return;
  for (int i = 0; i < tl->nunits; i++) free(tl->units[i].lane_free);
  free(tl->units);
  for (size_t i = 0; i < tl->nchunks; i++) free(tl->chunks[i]);
  free(tl->chunks);
  free(tl->strs);
  free(tl->slots);
  for (TlStrChunk *c = tl->str_chunks, *next; c; c = next) {
    next = c->next;
    free(c);
  }
  free(tl);
}

TpkStatus tpk_timeline_error(const TpkTimeline *tl, TpkError *err) {
  if (!tl) return tpk_error(err, TPK_ERR_INVALID, "timeline: no timeline (creating it failed?)");
  if (err) *err = tl->error;
  return tl->error.code;
}

void tpk_timeline_fail_alloc_after(TpkTimeline *tl, int64_t n) {
  if (tl) tl->fail_after = n < 0 ? -1 : n;
}

int tpk_timeline_add_unit(TpkTimeline *tl, const char *name, int lanes) {
  if (!tl_ok(tl)) return -1;
  if (!name || !*name) {
    tl_fail(tl, TPK_ERR_INVALID, "timeline: a unit needs a name");
    return -1;
  }
  if (lanes < 1 || lanes > TPK_TIMELINE_MAX_LANES) {
    tl_fail(tl, TPK_ERR_INVALID, "timeline: unit \"%.40s\" has %d lanes (1 to %d)", name, lanes,
            TPK_TIMELINE_MAX_LANES);
    return -1;
  }
  if (tl->nunits >= TPK_TIMELINE_MAX_UNITS) {
    tl_fail(tl, TPK_ERR_INVALID, "timeline: more than %d units", TPK_TIMELINE_MAX_UNITS);
    return -1;
  }
  size_t cap = (size_t)tl->units_cap;
  if (!tl_grow(tl, (void **)&tl->units, &cap, (size_t)tl->nunits + 1, sizeof *tl->units, "the unit table"))
    return -1;
  tl->units_cap = (int)cap;
  uint32_t name_id = str_intern(tl, name);
  if (name_id == UINT32_MAX) return -1;
  double *lane_free = tl_realloc(tl, NULL, (size_t)lanes * sizeof *lane_free);
  if (!lane_free) {
    tl_fail(tl, TPK_ERR_NOMEM, "timeline: out of memory adding unit \"%.40s\"", name);
    return -1;
  }
  for (int l = 0; l < lanes; l++) lane_free[l] = 0;
  tl->units[tl->nunits] = (TlUnit){.name = name_id, .lanes = lanes, .tid_base = tl->next_tid, .lane_free = lane_free};
  tl->next_tid += lanes;
  return tl->nunits++;
}

/* ---- Scheduling ---------------------------------------------------------------- */

static TlTask *task_at(const TpkTimeline *tl, TpkTaskId id) {
  return &tl->chunks[(size_t)id >> TASK_CHUNK_BITS][(size_t)id & (TASK_CHUNK - 1)];
}

/* Room for one more task (a new chunk every TASK_CHUNK tasks), or NULL. */
static TlTask *task_new(TpkTimeline *tl) {
  size_t chunk = (size_t)tl->ntasks >> TASK_CHUNK_BITS;
  if (chunk == tl->nchunks) {
    if (!tl_grow(tl, (void **)&tl->chunks, &tl->chunks_cap, chunk + 1, sizeof *tl->chunks, "the task index"))
      return NULL;
    TlTask *c = tl_realloc(tl, NULL, TASK_CHUNK * sizeof *c);
    if (!c) {
      tl_fail(tl, TPK_ERR_NOMEM, "timeline: out of memory at task %lld", (long long)tl->ntasks);
      return NULL;
    }
    tl->chunks[tl->nchunks++] = c;
  }
  return task_at(tl, tl->ntasks);
}

TpkTaskId tpk_timeline_add(TpkTimeline *tl, int unit, double cycles, const TpkTaskId *deps, size_t ndeps,
                           const char *label, const char *category) {
  if (!tl_ok(tl)) return TPK_TASK_NONE;
  if (unit < 0 || unit >= tl->nunits) {
    tl_fail(tl, TPK_ERR_INVALID, "timeline: task \"%.40s\" on unit %d, which does not exist", label ? label : "",
            unit);
    return TPK_TASK_NONE;
  }
  /* written so that NaN fails too */
  if (!(cycles >= 0 && cycles <= TPK_TIMELINE_MAX_CYCLES)) {
    tl_fail(tl, TPK_ERR_INVALID, "timeline: task \"%.40s\" lasts %g cycles (0 to %g)", label ? label : "", cycles,
            TPK_TIMELINE_MAX_CYCLES);
    return TPK_TASK_NONE;
  }
  if (ndeps && !deps) {
    tl_fail(tl, TPK_ERR_INVALID, "timeline: task \"%.40s\": %zu dependencies but no list", label ? label : "", ndeps);
    return TPK_TASK_NONE;
  }
  double ready = 0;
  for (size_t i = 0; i < ndeps; i++) {
    TpkTaskId d = deps[i];
    if (d == TPK_TASK_NONE) continue;
    if (d < 0 || d >= tl->ntasks) {
      tl_fail(tl, TPK_ERR_INVALID, "timeline: task \"%.40s\" depends on task %lld, which is not an earlier task",
              label ? label : "", (long long)d);
      return TPK_TASK_NONE;
    }
    double e = task_at(tl, d)->end;
    if (e > ready) ready = e;
  }
  /* Allocate everything before changing any state, so a failure leaves the
   * timeline as it was before this call. */
  uint32_t label_id = str_intern(tl, label);
  uint32_t cat_id = label_id == UINT32_MAX ? UINT32_MAX : str_intern(tl, category);
  TlTask *t = cat_id == UINT32_MAX ? NULL : task_new(tl);
  if (!t) return TPK_TASK_NONE;

  TlUnit *u = &tl->units[unit];
  int lane = 0;
  for (int l = 1; l < u->lanes; l++)
    if (u->lane_free[l] < u->lane_free[lane]) lane = l;
  double start = ready;
  if (u->last_start > start) start = u->last_start;
  if (u->lane_free[lane] > start) start = u->lane_free[lane];
  double end = start + cycles;
  *t = (TlTask){.start = start, .end = end, .label = label_id, .category = cat_id, .unit = (uint16_t)unit,
                .lane = (uint16_t)lane};
  u->lane_free[lane] = end;
  u->last_start = start;
  u->busy += cycles;
  u->tasks++;
  if (end > tl->makespan) tl->makespan = end;
  return tl->ntasks++;
}

TpkTaskId tpk_timeline_barrier(TpkTimeline *tl) {
  if (!tl_ok(tl)) return TPK_TASK_NONE;
  TlTask *t = task_new(tl);
  if (!t) return TPK_TASK_NONE;
  /* The makespan is the latest end of everything so far: depending on it is
   * depending on every task, without listing them. */
  *t = (TlTask){.start = tl->makespan, .end = tl->makespan, .unit = TL_NO_UNIT};
  return tl->ntasks++;
}

/* ---- Queries ---------------------------------------------------------------------- */

static const TlUnit *unit_at(const TpkTimeline *tl, int unit) {
  return tl && unit >= 0 && unit < tl->nunits ? &tl->units[unit] : NULL;
}

double tpk_timeline_makespan(const TpkTimeline *tl) { return tl ? tl->makespan : 0; }
int64_t tpk_timeline_task_count(const TpkTimeline *tl) { return tl ? tl->ntasks : 0; }
int tpk_timeline_unit_count(const TpkTimeline *tl) { return tl ? tl->nunits : 0; }

const char *tpk_timeline_unit_name(const TpkTimeline *tl, int unit) {
  const TlUnit *u = unit_at(tl, unit);
  return u ? tl->strs[u->name] : NULL;
}

int tpk_timeline_unit_lanes(const TpkTimeline *tl, int unit) {
  const TlUnit *u = unit_at(tl, unit);
  return u ? u->lanes : 0;
}

int64_t tpk_timeline_unit_tasks(const TpkTimeline *tl, int unit) {
  const TlUnit *u = unit_at(tl, unit);
  return u ? u->tasks : -1;
}

double tpk_timeline_unit_busy(const TpkTimeline *tl, int unit) {
  const TlUnit *u = unit_at(tl, unit);
  return u ? u->busy : 0;
}

double tpk_timeline_unit_utilisation(const TpkTimeline *tl, int unit) {
  const TlUnit *u = unit_at(tl, unit);
  if (!u || tl->makespan <= 0) return 0;
  return u->busy / ((double)u->lanes * tl->makespan);
}

bool tpk_timeline_task_info(const TpkTimeline *tl, TpkTaskId id, TpkTimelineTaskInfo *out) {
  if (!tl || id < 0 || id >= tl->ntasks) return false;
  const TlTask *t = task_at(tl, id);
  *out = (TpkTimelineTaskInfo){.unit = t->unit == TL_NO_UNIT ? -1 : t->unit, .lane = t->lane, .start = t->start,
                               .end = t->end, .label = tl->strs[t->label], .category = tl->strs[t->category]};
  return true;
}

double tpk_timeline_task_start(const TpkTimeline *tl, TpkTaskId id) {
  return tl && id >= 0 && id < tl->ntasks ? task_at(tl, id)->start : -1;
}

double tpk_timeline_task_end(const TpkTimeline *tl, TpkTaskId id) {
  return tl && id >= 0 && id < tl->ntasks ? task_at(tl, id)->end : -1;
}

size_t tpk_timeline_memory(const TpkTimeline *tl) {
  if (!tl) return 0;
  size_t n = sizeof *tl + (size_t)tl->units_cap * sizeof *tl->units;
  for (int i = 0; i < tl->nunits; i++) n += (size_t)tl->units[i].lanes * sizeof(double);
  n += tl->chunks_cap * sizeof *tl->chunks + tl->nchunks * TASK_CHUNK * sizeof(TlTask);
  n += (size_t)tl->strs_cap * sizeof *tl->strs + (size_t)tl->slots_cap * sizeof *tl->slots + tl->str_bytes;
  return n;
}

/* ---- Chrome trace -------------------------------------------------------------------
 * Events go into a TpkStr; when writing a file, the string is flushed every
 * TRACE_FLUSH bytes, so memory stays bounded for any number of tasks. */

typedef struct TraceOut {
  TpkStr *s;     /* where text goes */
  FILE *f;       /* file to flush to, NULL when building in memory */
  bool io_error; /* a write to f failed */
} TraceOut;

static void trace_flush(TraceOut *o, bool force) {
  if (!o->f || o->s->failed || (!force && o->s->len < TRACE_FLUSH)) return;
  if (o->s->len && fwrite(o->s->data, 1, o->s->len, o->f) != o->s->len) o->io_error = true;
  o->s->len = 0;
  if (o->s->data) o->s->data[0] = 0;
}

/* Decimal digits of m, appended. */
static void put_uint(TpkStr *s, unsigned long long m) {
  char buf[24], *e = buf + sizeof buf, *q = e;
  do *--q = (char)('0' + m % 10);
  while (m /= 10);
  tpk_str_putn(s, q, (size_t)(e - q));
}

/* A JSON number: integers (most cycle counts) exactly, the rest with 15
 * significant digits. Hand-formatting the common cases matters: printf was
 * most of the writer's time. JSON has no inf or NaN; durations are checked on
 * input so neither occurs, but a 0 would keep the file loadable if one did. */
static void put_num(TpkStr *s, double v) {
  if (!isfinite(v)) v = 0;
  if (v == floor(v) && fabs(v) < 9007199254740992.0) {
    if (v < 0) tpk_str_putc(s, '-');
    put_uint(s, (unsigned long long)fabs(v));
    return;
  }
  char buf[40];
  int n = snprintf(buf, sizeof buf, "%.15g", v);
  tpk_str_putn(s, buf, n > 0 && (size_t)n < sizeof buf ? (size_t)n : 0);
}

/* A time in microseconds, to the picosecond (1e-6 us): finer than a cycle of
 * any clock below 1 THz, and as short as the value allows ("1.5", not
 * "1.500000"). Times are never negative. */
static void put_us(TpkStr *s, double us) {
  if (!(us >= 0 && us < 9e12)) {
    put_num(s, us);
    return;
  }
  unsigned long long ps = (unsigned long long)llround(us * 1e6);
  put_uint(s, ps / 1000000);
  unsigned frac = (unsigned)(ps % 1000000);
  if (!frac) return;
  char buf[8] = {'.'};
  int n = 6;
  while (frac % 10 == 0) frac /= 10, n--;
  for (int i = n; i >= 1; i--, frac /= 10) buf[i] = (char)('0' + frac % 10);
  tpk_str_putn(s, buf, (size_t)n + 1);
}

static void put_meta(TpkStr *s, const char *what, int pid, int tid, const char *key, const char *name, int num) {
  tpk_str_puts(s, ",\n{\"name\":\"");
  tpk_str_puts(s, what);
  tpk_str_printf(s, "\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"%s\":", pid, tid, key);
  if (name) tpk_str_put_json(s, name);
  else put_num(s, num);
  tpk_str_puts(s, "}}");
}

static TpkStatus trace_emit(const TpkTimeline *tl, const TpkTimelineTraceOptions *opts, TraceOut *o,
                            TpkError *err) {
  if (!tl) return tpk_error(err, TPK_ERR_INVALID, "timeline: no timeline (creating it failed?)");
  if (tl->error.code != TPK_OK) {
    if (err) *err = tl->error;
    return tl->error.code;
  }
  if (!opts || !(opts->clock_hz > 0) || !isfinite(opts->clock_hz))
    return tpk_error(err, TPK_ERR_INVALID, "timeline trace: the clock must be a positive number of Hz");
  const char *pname = opts->process_name && *opts->process_name ? opts->process_name : "tpk";
  size_t max_events = opts->max_events ? opts->max_events : TPK_TIMELINE_TRACE_DEFAULT_MAX;
  int pid = opts->pid ? opts->pid : 1;
  double us = 1e6 / opts->clock_hz; /* microseconds per cycle */
  TpkStr *s = o->s;

  tpk_str_puts(s, "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
  tpk_str_printf(s, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":", pid);
  tpk_str_put_json(s, pname);
  tpk_str_puts(s, "}}");
  TpkStr lane_name = {0};
  for (int i = 0; i < tl->nunits; i++) {
    const TlUnit *u = &tl->units[i];
    for (int l = 0; l < u->lanes; l++) {
      lane_name.len = 0;
      tpk_str_puts(&lane_name, tl->strs[u->name]);
      if (u->lanes > 1) tpk_str_printf(&lane_name, " lane %d", l);
      put_meta(s, "thread_name", pid, u->tid_base + l, "name", lane_name.failed ? "?" : lane_name.data, 0);
      /* Perfetto orders threads by name otherwise: keep the units' order */
      put_meta(s, "thread_sort_index", pid, u->tid_base + l, "sort_index", NULL, u->tid_base + l);
    }
  }
  bool name_failed = lane_name.failed;
  tpk_str_free(&lane_name);

  size_t written = 0, omitted = 0;
  double first_omitted = INFINITY; /* earliest start of an omitted task */
  for (TpkTaskId id = 0; id < tl->ntasks && !s->failed && !o->io_error; id++) {
    const TlTask *t = task_at(tl, id);
    if (t->unit == TL_NO_UNIT) continue;
    if (written >= max_events) {
      omitted++;
      if (t->start < first_omitted) first_omitted = t->start;
      continue;
    }
    const TlUnit *u = &tl->units[t->unit];
    tpk_str_puts(s, ",\n{\"name\":");
    tpk_str_put_json(s, t->label ? tl->strs[t->label] : tl->strs[u->name]);
    if (t->category) {
      tpk_str_puts(s, ",\"cat\":");
      tpk_str_put_json(s, tl->strs[t->category]);
    }
    tpk_str_puts(s, ",\"ph\":\"X\",\"pid\":");
    put_num(s, pid);
    tpk_str_puts(s, ",\"tid\":");
    put_num(s, u->tid_base + t->lane);
    tpk_str_puts(s, ",\"ts\":");
    put_us(s, t->start * us);
    tpk_str_puts(s, ",\"dur\":");
    put_us(s, (t->end - t->start) * us);
    tpk_str_puts(s, ",\"args\":{\"task\":");
    put_num(s, (double)id);
    tpk_str_puts(s, ",\"start_cycle\":");
    put_num(s, t->start);
    tpk_str_puts(s, ",\"cycles\":");
    put_num(s, t->end - t->start);
    tpk_str_puts(s, "}}");
    written++;
    trace_flush(o, false);
  }
  if (omitted) {
    tpk_str_printf(s, ",\n{\"name\":\"trace truncated: %zu of %zu tasks omitted\",\"ph\":\"i\",\"s\":\"g\","
                      "\"pid\":%d,\"tid\":0,\"ts\":",
                   omitted, written + omitted, pid);
    put_us(s, first_omitted * us);
    tpk_str_printf(s, ",\"args\":{\"omitted\":%zu,\"total\":%zu,\"complete_before_cycle\":", omitted,
                   written + omitted);
    put_num(s, first_omitted);
    tpk_str_puts(s, "}}");
  }
  tpk_str_puts(s, "\n],\n\"otherData\":{\"clock_hz\":");
  put_num(s, opts->clock_hz);
  tpk_str_puts(s, ",\"makespan_cycles\":");
  put_num(s, tl->makespan);
  tpk_str_printf(s, ",\"events_written\":%zu,\"events_omitted\":%zu}}\n", written, omitted);
  trace_flush(o, true);
  if (s->failed || name_failed) return tpk_error(err, TPK_ERR_NOMEM, "timeline trace: out of memory");
  if (o->io_error) return tpk_error(err, TPK_ERR_IO, "timeline trace: write failed");
  return TPK_OK;
}

TpkStatus tpk_timeline_trace_json_opts(const TpkTimeline *tl, const TpkTimelineTraceOptions *opts, TpkStr *out,
                                       TpkError *err) {
  TraceOut o = {.s = out};
  return trace_emit(tl, opts, &o, err);
}

TpkStatus tpk_timeline_trace_json(const TpkTimeline *tl, double clock_hz, const char *process_name, TpkStr *out) {
  TpkTimelineTraceOptions opts = {.clock_hz = clock_hz, .process_name = process_name};
  return tpk_timeline_trace_json_opts(tl, &opts, out, NULL);
}

typedef struct TraceFile {
  const TpkTimeline *tl;
  const TpkTimelineTraceOptions *opts;
} TraceFile;

static TpkStatus trace_fill(FILE *f, void *arg, TpkError *err) {
  const TraceFile *t = arg;
  TpkStr buf = {0};
  TraceOut o = {.s = &buf, .f = f};
  TpkStatus st = trace_emit(t->tl, t->opts, &o, err);
  tpk_str_free(&buf);
  return st == TPK_ERR_IO ? TPK_OK : st; /* tpk_file_write reports write errors, naming the file */
}

TpkStatus tpk_timeline_write_trace_opts(const TpkTimeline *tl, const char *path, const TpkTimelineTraceOptions *opts,
                                        TpkError *err) {
  if (!path) return tpk_error(err, TPK_ERR_INVALID, "timeline trace: no path");
  /* Check before creating the file, so a failed timeline leaves none behind. */
  if (!tl || tl->error.code != TPK_OK) return trace_emit(tl, opts, &(TraceOut){0}, err);
  return tpk_file_write(path, 0666, trace_fill, &(TraceFile){tl, opts}, err);
}

TpkStatus tpk_timeline_write_trace(const TpkTimeline *tl, const char *path, double clock_hz, const char *process_name,
                                   TpkError *err) {
  TpkTimelineTraceOptions opts = {.clock_hz = clock_hz, .process_name = process_name};
  return tpk_timeline_write_trace_opts(tl, path, &opts, err);
}
