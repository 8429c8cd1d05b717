import sys

from dflash_rocm_plugin.bench.cli import main

sys.exit(main())
