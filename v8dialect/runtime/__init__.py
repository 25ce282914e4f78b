"""Compiling the emitted C and running it: cffi builds, host facts, programs, model sessions."""
