// Moved to <runhooks/detail/forwarding_hook.hpp> (it needs no MPI); this name stays until
// <runhooks/training_session.hpp> includes the new one.
#pragma once

#include <runhooks/detail/forwarding_hook.hpp>
