"""One module per CLI subcommand; heavy imports stay inside run()."""
