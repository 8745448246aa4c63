from vpuc.cli import entry

entry()
