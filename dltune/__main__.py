"""``python -m dltune``: the same command line as the ``dltune`` script, for a node where only the
package is on the path (a wheel installed with --target, a checkout on PYTHONPATH)."""

from dltune.cli import main

if __name__ == "__main__":
    main()
