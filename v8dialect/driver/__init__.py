"""The command-line tools (v8-opt, v8-build, v8-run), their argument parsing and text checks."""
