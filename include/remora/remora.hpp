// remora/remora.hpp - umbrella header.
#pragma once

#include "remora/access.hpp"
#include "remora/completion.hpp"
#include "remora/completion_queue.hpp"
#include "remora/endpoint.hpp"
#include "remora/error.hpp"
#include "remora/fabric.hpp"
#include "remora/listener.hpp"
#include "remora/memory_region.hpp"
#include "remora/protection_zone.hpp"
#include "remora/remote_region.hpp"
#include "remora/result.hpp"
#include "remora/shared_receive_queue.hpp"
