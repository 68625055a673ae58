from nspec.cli import main

raise SystemExit(main())
