"""``python -m tandem.cli``."""

from tandem.cli import main

main()
