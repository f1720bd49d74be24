import sys

from storage_engine.tools.cli import main

sys.exit(main())
