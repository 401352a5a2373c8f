from dwtune.cli import main

raise SystemExit(main())
