// meshrt's public API in one include, installed as <meshrt/meshrt.h>: joining a job, communicators
// and their ops, works, errors, DeviceMesh, in-process worlds, user scopes, the scope tree, the
// end-of-run report and on-demand flight-recorder dumps. Nothing internal (watchdog, store server,
// straggler exchange) and no third-party header comes with it.
//
//   auto world = meshrt::init();  // RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (meshrun, torchrun)
//   auto mesh = meshrt::init_device_mesh({2, world->size() / 2}, {"dp", "tp"});
//   mesh->comm("tp").all_reduce(meshrt::view(grad))->wait();
#pragma once

#include "mesh/device_mesh.h"
#include "runtime/backends/inproc/inproc_backend.h"
#include "runtime/buffer.h"
#include "runtime/communicator.h"
#include "runtime/error.h"
#include "runtime/init.h"
#include "runtime/reduce_op.h"
#include "runtime/work.h"
#include "trace/dump.h"
#include "trace/run_report.h"
#include "trace/scope.h"
#include "trace/scope_tree.h"
