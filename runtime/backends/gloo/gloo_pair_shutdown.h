// Interrupts Gloo TCP ops in flight: shuts down the sockets of a context's pairs, so that every
// wait on them, here and on the peers, fails at once as if the peer had died.
#pragma once

namespace gloo {
class Context;
}

namespace meshrt {

// Shuts down (SHUT_RDWR) every TCP pair socket of `context`: Gloo's device thread then sees the
// connection close and fails each pending send and receive with an IoException, and each peer
// sees its end close the same way. The context can carry no more ops. Any thread, while ops run.
void shutdown_gloo_pairs(gloo::Context& context) noexcept;

}  // namespace meshrt
