/*
 * timeline.h — the simulator's timing core: an event timeline of hardware
 * units with dependencies, and its Chrome-trace (Perfetto) writer.
 *
 * Internal to sim/. It knows nothing about IR or chips: the simulator turns a
 * kernel into tasks ("dot 128x256x128" on "mxu0", "dma x[i,k] 64 KiB" on
 * "dma") and asks here when each one runs.
 *
 * The model
 *   A unit ("scalar", "vpu", "mxu0", "dma" with 4 lanes, "ici") runs up to
 *   `lanes` tasks at once. Tasks on a unit are issued in submission order
 *   (in-order issue), each on the lane that frees first. A task starts at
 *     max(end of each dependency,
 *         start of the previous task on its unit   -- in-order issue,
 *         the earliest time a lane of its unit is free)
 *   and ends at start + cycles. Everything is computed when the task is added
 *   (O(lanes + deps) per task, O(1) amortised storage), so a double-buffered
 *   pipeline is written the way the hardware is driven: issue the DMA of step
 *   k+1, then the compute of step k; the two overlap.
 *
 *   In-order issue is deliberate and has a visible consequence: a task whose
 *   dependencies finish late holds back every later task on the same unit,
 *   even independent ones (as on an in-order core or a DMA queue). A unit
 *   that can reorder is modelled as several units, or as one task stream
 *   submitted in the order the hardware would pick.
 *
 * Memory
 *   32 bytes per task (start, end, unit, lane, label and category ids); the
 *   dependency lists are read at add time and not kept. Labels and
 *   categories are copied and interned: a label used by a million tasks is
 *   stored once; each distinct string costs its length + 1 plus about 24
 *   bytes of table. Callers need not keep their strings alive.
 *
 * Errors
 *   The first failure (out of memory, a bad argument such as an unknown unit,
 *   a negative duration or a dependency on a task not yet added) is recorded
 *   in the timeline; from then on every call that adds is a no-op returning
 *   TPK_TASK_NONE (or -1), queries of what exists keep working, and the trace
 *   writers return the recorded error. Callers check tpk_timeline_error once
 *   at the end, like TpkStr's `failed`. A NULL timeline is treated as failed.
 */
#ifndef TPK_SIM_TIMELINE_H
#define TPK_SIM_TIMELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* A task (or barrier) id: dense, from 0, in submission order. */
typedef int64_t TpkTaskId;
/* "No task": returned when adding failed; ignored in dependency lists, so a
 * pipeline's first step can pass its (absent) predecessor unconditionally. */
#define TPK_TASK_NONE ((TpkTaskId)-1)

typedef struct TpkTimeline TpkTimeline;

/* What a task became once scheduled (tpk_timeline_task_info). */
typedef struct TpkTimelineTaskInfo {
  int unit;             /* unit index, -1 for a barrier */
  int lane;             /* lane of the unit it ran on, 0 for a barrier */
  double start;         /* cycle it started */
  double end;           /* start + duration */
  const char *label;    /* interned copy, "" when none; valid until destroy */
  const char *category; /* interned copy, "" when none; valid until destroy */
} TpkTimelineTaskInfo;

/* How a trace is written. Zero-initialised fields take the defaults. */
typedef struct TpkTimelineTraceOptions {
  double clock_hz;          /* unit cycles per second, > 0 (required) */
  const char *process_name; /* the process row in the viewer; NULL: "tpk" */
  size_t max_events;        /* most task ("X") events written; 0: the default
                               TPK_TIMELINE_TRACE_DEFAULT_MAX; SIZE_MAX: all */
  int pid;                  /* process id in the trace, so traces of several
                               chips can be concatenated; 0: 1 */
} TpkTimelineTraceOptions;

/* Chrome's viewer becomes unusable and Perfetto slow well before ~10^6
 * events (about 150 MB of JSON): the default cap. */
#define TPK_TIMELINE_TRACE_DEFAULT_MAX ((size_t)1000000)

/* Limits checked on input (beyond them: TPK_ERR_INVALID). */
enum {
  TPK_TIMELINE_MAX_UNITS = 65535, /* unit index fits 16 bits */
  TPK_TIMELINE_MAX_LANES = 4096   /* scheduling is O(lanes) per task */
};
/* Largest duration of one task: 10^18 cycles (decades at any clock) keeps
 * every sum finite, so the trace never holds inf. */
#define TPK_TIMELINE_MAX_CYCLES 1e18

/* ---- Building ------------------------------------------------------------ */

/* *out is NULL and TPK_ERR_NOMEM returned when memory ran out. */
TpkStatus tpk_timeline_create(TpkTimeline **out);
void tpk_timeline_destroy(TpkTimeline *tl);

/* TPK_OK, or the first recorded failure (copied to err when non-NULL). */
TpkStatus tpk_timeline_error(const TpkTimeline *tl, TpkError *err);

/* Add a unit running `lanes` (1..TPK_TIMELINE_MAX_LANES) tasks at once.
 * Returns its index (0, 1, ... in order), or -1 on failure. The name is
 * copied; in the trace a one-lane unit's row is its name ("mxu0"), a
 * several-lane unit's rows are "dma lane 0" ... "dma lane 3". */
int tpk_timeline_add_unit(TpkTimeline *tl, const char *name, int lanes);

/* Add a task of `cycles` (finite, 0 <= cycles <= TPK_TIMELINE_MAX_CYCLES) on
 * `unit`, after the tasks in deps[0..ndeps) (earlier ids; TPK_TASK_NONE
 * entries are skipped; deps may be NULL when ndeps is 0). label and category
 * may be NULL; both are copied. Returns the new id, or TPK_TASK_NONE. */
TpkTaskId tpk_timeline_add(TpkTimeline *tl, int unit, double cycles, const TpkTaskId *deps, size_t ndeps,
                           const char *label, const char *category);

/* A pseudo task on no unit, of zero duration, that depends on every task so
 * far: it ends at the current makespan. Tasks that list it as a dependency
 * start after everything added before it (successive grids, kernel launches);
 * tasks that do not are unaffected. It takes an id (counted by
 * tpk_timeline_task_count) but no unit time and no trace event. */
TpkTaskId tpk_timeline_barrier(TpkTimeline *tl);

/* ---- Queries ------------------------------------------------------------- */

/* End of the last task, in cycles (0 when empty). */
double tpk_timeline_makespan(const TpkTimeline *tl);
/* Ids handed out: tasks and barriers. */
int64_t tpk_timeline_task_count(const TpkTimeline *tl);
int tpk_timeline_unit_count(const TpkTimeline *tl);
/* NULL / 0 / -1 for a unit that does not exist. */
const char *tpk_timeline_unit_name(const TpkTimeline *tl, int unit);
int tpk_timeline_unit_lanes(const TpkTimeline *tl, int unit);
int64_t tpk_timeline_unit_tasks(const TpkTimeline *tl, int unit);
/* Sum of the durations of the unit's tasks, over all its lanes. */
double tpk_timeline_unit_busy(const TpkTimeline *tl, int unit);
/* busy / (lanes * makespan), in [0, 1]; 0 when the makespan is 0. */
double tpk_timeline_unit_utilisation(const TpkTimeline *tl, int unit);
/* Start and end of a task or barrier; -1 for an id that does not exist. */
double tpk_timeline_task_start(const TpkTimeline *tl, TpkTaskId id);
double tpk_timeline_task_end(const TpkTimeline *tl, TpkTaskId id);
/* false for an id that does not exist. */
bool tpk_timeline_task_info(const TpkTimeline *tl, TpkTaskId id, TpkTimelineTaskInfo *out);
/* Bytes of heap the timeline holds (tasks, units, interned strings). */
size_t tpk_timeline_memory(const TpkTimeline *tl);

/* ---- Chrome trace ----------------------------------------------------------
 * The JSON object format ({"traceEvents": [...]}) that Perfetto
 * (ui.perfetto.dev) and chrome://tracing load: one thread per unit lane, named
 * by a thread_name metadata event; one complete ("X") event per task with ts
 * and dur in microseconds (cycles / clock_hz * 1e6), name = label (the unit's
 * name when the label is empty), cat = category (when not empty), and args
 * {"task": id, "start_cycle": ..., "cycles": ...}. Events are written in
 * submission order; beyond max_events the rest are counted, not written, and
 * a global instant event "trace truncated: N of M tasks omitted" (args:
 * omitted, total, complete_before_cycle: every task starting earlier is in
 * the trace) closes the list; "otherData" repeats the counts. Strings are
 * escaped for JSON; bytes that are not UTF-8 become U+FFFD. */

/* Append the trace to *out (which the caller frees). TPK_ERR_INVALID for a bad
 * clock, the timeline's error if it failed, TPK_ERR_NOMEM if *out failed. */
TpkStatus tpk_timeline_trace_json(const TpkTimeline *tl, double clock_hz, const char *process_name, TpkStr *out);
TpkStatus tpk_timeline_trace_json_opts(const TpkTimeline *tl, const TpkTimelineTraceOptions *opts, TpkStr *out,
                                       TpkError *err);
/* Write the trace to a file, streaming (memory stays bounded whatever the
 * number of tasks), through tpk_file_write (base/files.h): a new file renamed
 * over the old, never through a symbolic link. TPK_ERR_IO when the file
 * cannot be written, TPK_ERR_INVALID for a path it refuses. */
TpkStatus tpk_timeline_write_trace(const TpkTimeline *tl, const char *path, double clock_hz, const char *process_name,
                                   TpkError *err);
TpkStatus tpk_timeline_write_trace_opts(const TpkTimeline *tl, const char *path, const TpkTimelineTraceOptions *opts,
                                        TpkError *err);

/* ---- Test hook -------------------------------------------------------------
 * Let the next n allocations of this timeline succeed and every later one
 * fail, so tests reach the out-of-memory paths; n < 0 turns it off. */
void tpk_timeline_fail_alloc_after(TpkTimeline *tl, int64_t n);

#endif
