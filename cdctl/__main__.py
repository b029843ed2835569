"""`python -m cdctl`: the same as the `cdctl` console script."""

from cdctl.cli.main import main

main()
