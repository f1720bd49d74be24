import sys

from storage_engine.cli.main import main

sys.exit(main())
