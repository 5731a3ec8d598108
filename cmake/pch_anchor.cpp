// The one source of the precompiled-header targets (cmake/precompiled_headers.cmake): CMake builds
// a target's precompiled header only for a language the target compiles, so each of them needs a
// C++ file. Nothing links the object it makes.
