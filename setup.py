"""Build of the optional compiled scan of the DCGM parser; the metadata is in pyproject.toml.

``optional=True``: on a machine without a C compiler the build of the extension fails with a
warning and the project still installs; the parser then uses its numpy path
(``gpu_platform.finops.feeds.dcgm.SCAN_PATH`` says which one is in use).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "gpu_platform.finops.feeds._dcgm_scan",
            sources=["gpu_platform/finops/feeds/_dcgm_scan.c"],
            extra_compile_args=["-O3", "-fno-fast-math"],
            optional=True,
        )
    ],
)
