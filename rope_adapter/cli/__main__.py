import sys

from rope_adapter.cli import main

sys.exit(main())
