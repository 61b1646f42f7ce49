// Names for enum values as {value, name} rows, for printing (inspect, doctor, plan): one lookup over any table.
#pragma once

#include <cstddef>

namespace mopt {

template <class E>
struct EnumName {
  E value;
  const char* name;
};

// The name of `e` in `names`, "?" for a value the table lacks.
template <class E, size_t N>
constexpr const char* name_of(E e, const EnumName<E> (&names)[N]) {
  for (const EnumName<E>& n : names)
    if (n.value == e) return n.name;
  return "?";
}

}  // namespace mopt
