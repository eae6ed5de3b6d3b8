// Include Boost.Asio through this header. Boost 1.74's asio uses std::exchange without
// including <utility>, which GCC 12 in C++20 mode does not pull in otherwise.
#pragma once

// clang-format off
#include <utility>
#include <boost/asio.hpp>
// clang-format on
