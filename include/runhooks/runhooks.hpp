// The umbrella header for users: the session, its protocol types and the built-in hooks.
#pragma once

#include <runhooks/clock.hpp>
#include <runhooks/concepts.hpp>
#include <runhooks/coordinator.hpp>
#include <runhooks/error.hpp>
#include <runhooks/log.hpp>
#include <runhooks/monitored_session.hpp>
#include <runhooks/session_creator.hpp>
#include <runhooks/session_run_args.hpp>
#include <runhooks/session_run_context.hpp>
#include <runhooks/hooks/second_or_step_timer.hpp>
#include <runhooks/hooks/stop_at_step_hook.hpp>
#include <runhooks/hooks/step_counter_hook.hpp>
#include <runhooks/hooks/global_step_waiter_hook.hpp>
#include <runhooks/backends/shared_global_step.hpp>
