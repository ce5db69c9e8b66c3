// meshrt's public API in one include: init, communicators, buffers, works, errors, backends.
#pragma once

#include "runtime/buffer.h"
#include "runtime/communicator.h"
#include "runtime/debug_stats.h"
#include "runtime/error.h"
#include "runtime/init.h"
#include "runtime/inproc_backend.h"
#include "runtime/prefix_store.h"
#include "runtime/reduce_op.h"
#include "runtime/store.h"
#include "runtime/straggler_exchange.h"
#include "runtime/tcp_store.h"
#include "runtime/tcp_store_server.h"
#include "runtime/watchdog.h"
#include "runtime/work.h"
