/*
 * opstream.h — op streams recorded from PyTorch (tools/record_streams.py,
 * bench/streams/NAME.ops), replayed through the eager API of tpk.h.
 *
 * A stream file lists inputs (dtype, symbolic dims, how to fill them), ATen
 * ops on values and outputs; sizes are expressions of symbols whose
 * recorded values the file gives and a replay may change (another sequence
 * length). Replaying submits every op with tpk_stream_op, destroying each
 * value's buffer after its last use as PyTorch frees a tensor, so a fused
 * window need not compute what nobody reads. int64 tensors are i32 here
 * (tpk's index type).
 */
#ifndef TPK_CLI_OPSTREAM_H
#define TPK_CLI_OPSTREAM_H

#include "tpk.h"

typedef struct OpStream OpStream;

/* Parse a stream's text; NULL with a message "NAME:LINE: ..." in err. */
OpStream *opstream_parse(const char *name, const char *text, char *err, size_t errlen);
OpStream *opstream_load(const char *path, char *err, size_t errlen);
void opstream_free(OpStream *s);

int opstream_symbol_count(const OpStream *s);
const char *opstream_symbol_name(const OpStream *s, int i);
int64_t opstream_symbol_recorded(const OpStream *s, int i);
int opstream_op_count(const OpStream *s);
int opstream_input_count(const OpStream *s);
int opstream_output_count(const OpStream *s);

/* Inputs at the given symbol values (NULL: as recorded), on dev, filled as
 * the file says from a seeded generator: inputs[opstream_input_count]. */
TpkStatus opstream_make_inputs(const OpStream *s, TpkDevice *dev, const int64_t *sizes, uint64_t seed,
                               TpkBuffer **inputs);
/* Submit every op to st on the inputs; outputs[opstream_output_count]
 * receive the output buffers (the caller's). Does not sync. On a failed op
 * its error is tpk_last_error() and *failed (may be NULL) is its line in
 * the file; what the replay made is destroyed. */
TpkStatus opstream_run(const OpStream *s, TpkStream *st, const int64_t *sizes, TpkBuffer *const *inputs,
                       TpkBuffer **outputs, int *failed);

#endif
