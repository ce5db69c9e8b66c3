// Numbers for people: three significant digits and a unit picked so that the digits stay few
// ("1.5 KiB", "133 ms", "922 KB/s"). The job report prints every number through these, so a test
// can predict exactly what the page shows.
#pragma once

#include <cstdint>
#include <string>

namespace meshrt::trace {

// `value` rounded to three significant digits, without exponent or trailing zeros ("0.00123",
// "12.3", "1230").
std::string three_digits(double value);
// Bytes in binary units: "4 B", "1 KiB", "1.5 KiB", "118 MiB".
std::string human_bytes(double bytes);
// A duration given in milliseconds: "850 ns", "177 µs", "2.22 ms", "1.23 s"; "0 ms" for zero.
std::string human_ms(double ms);
// A bandwidth given in GB/s (1e9 bytes/s, as nccl-tests): "922 KB/s", "1.2 MB/s", "11.5 GB/s".
std::string human_gbps(double gbps);

}  // namespace meshrt::trace
