# -*- Python -*-
# The GoogleTest unit tests: every executable named *Tests under
# build/test/unit, one lit test per GoogleTest case.
import os

import lit.formats

config.name = "attn-unit"
config.suffixes = []
config.test_source_root = os.path.join(config.attn_obj_root, "test", "unit")
config.test_exec_root = config.test_source_root
config.test_format = lit.formats.GoogleTest(".", "Tests")
