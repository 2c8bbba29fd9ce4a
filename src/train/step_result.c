/* step_result.c: the step's statistics into its result (see step_result.h). */
#include "train/step_result.h"

void step_result_record(StepResult *r, const StepStats *st, const EngineStepStats *es, const Engine *e,
                        double after) {
    r->pipe_busy = es->busy;
    r->pipe_idle = es->idle;
    r->max_live = es->max_live;
    r->bubble = st->bubble;
    r->stop_signal = st->stop_signal;
    r->bubble_theory = es->bubble_theory;
    r->bubble_simulated = es->bubble_simulated;
    r->median_compute = st->median_compute;
    r->straggler = st->straggler;
    r->straggler_compute = st->straggler >= 0 ? st->compute[st->straggler] : 0;
    r->slowest = st->slowest + after;
    r->fastest = st->fastest + after;
    r->peak_rss = st->peak_rss;
    CommStats cs = engine_comm_stats(e);
    r->comm_bytes = cs.bytes_sent;
    r->comm_bytes_fp32 = cs.uncompressed_bytes;
    r->comm_exposed = cs.wait_seconds;
    r->comm_busy = cs.busy_seconds;
    CommStats context = engine_context_stats(e);
    r->cp_bytes = context.bytes_sent;
    r->cp_exposed = context.wait_seconds;
    CommStats experts = engine_expert_stats(e);
    r->moe_a2a_bytes = experts.bytes_sent;
    r->moe_a2a_exposed = experts.wait_seconds;
}
