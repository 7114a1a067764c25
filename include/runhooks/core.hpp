// The light header: MonitoredSession and its protocol types, the session creators and retry
// policies, the log sink, StopAtStepHook, StepCounterHook (log and callback outputs) and the
// SecondOrStepTimer. No file, thread or coordinator machinery: a hook or program that uses those
// includes their headers (docs/hooks.md, "Headers").
#pragma once

#include <runhooks/detail/config.hpp>
#include <runhooks/clock.hpp>
#include <runhooks/concepts.hpp>
#include <runhooks/error.hpp>
#include <runhooks/log.hpp>
#include <runhooks/monitored_session.hpp>
#include <runhooks/session_creator.hpp>
#include <runhooks/session_run_args.hpp>
#include <runhooks/session_run_context.hpp>
#include <runhooks/hooks/second_or_step_timer.hpp>
#include <runhooks/hooks/stop_at_step_hook.hpp>
#include <runhooks/hooks/step_counter_hook.hpp>
