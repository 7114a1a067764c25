// Everything but <runhooks/benchmark.hpp> (which needs Google Benchmark), for convenience. A loop
// that wants the shortest compile includes <runhooks/core.hpp> and what it uses.
#pragma once

#include <runhooks/detail/config.hpp>
#include <runhooks/core.hpp>
#include <runhooks/coordinator.hpp>
#include <runhooks/manual_clock.hpp>
#include <runhooks/hooks/global_step_waiter_hook.hpp>
#include <runhooks/hooks/early_stopping_hook.hpp>
#include <runhooks/hooks/feed_fn_hook.hpp>
#include <runhooks/hooks/final_ops_hook.hpp>
#include <runhooks/hooks/lambda_hook.hpp>
#include <runhooks/hooks/logging_tensor_hook.hpp>
#include <runhooks/hooks/nan_tensor_hook.hpp>
#include <runhooks/hooks/profiler_hook.hpp>
#include <runhooks/hooks/progress_bar_hook.hpp>
#include <runhooks/hooks/summary_saver_hook.hpp>
#include <runhooks/keys.hpp>
#include <runhooks/link_hooks.hpp>
#include <runhooks/backends/shared_global_step.hpp>
#include <runhooks/outputs/csv_output.hpp>
#include <runhooks/outputs/summary_output.hpp>
#include <runhooks/summary/event_writer.hpp>
#include <runhooks/summary/event_reader.hpp>
#include <runhooks/summary/histogram.hpp>
#include <runhooks/hooks/signal_stop_hook.hpp>
#include <runhooks/checkpoint/checkpoint_error.hpp>
#include <runhooks/checkpoint/checkpointable.hpp>
#include <runhooks/checkpoint/flat_arrays.hpp>
#include <runhooks/checkpoint/checkpoint_state.hpp>
#include <runhooks/checkpoint/checkpoint_manager.hpp>
#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/checkpoint/chief_session_creator.hpp>
#include <runhooks/training_session.hpp>
