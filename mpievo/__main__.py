from mpievo.cli.main import main

raise SystemExit(main())
