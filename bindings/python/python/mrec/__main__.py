"""``python -m mrec import FILE... OUT``: every structure of files ASE reads
into one collection (``mrec.import_files``), by the mapping of ``mrec import
aselmdb``.

Exit status: 0; 1 a refusal of the format; 3 i/o; 4 bad input (named by
source, key and problem); 130 interrupted (``OUT`` is as it was). The same
as ``mrec import``'s.
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from . import BadInput, Refused, import_files


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mrec")
    commands = parser.add_subparsers(dest="command", required=True)
    imp = commands.add_parser(
        "import",
        help="import files ASE reads (extxyz, ASE databases, ...) into a collection",
        description="Every structure of FILE... (any format ase.io reads; ASE databases with "
        "their key-value pairs and data) into the collection OUT, one source per file, "
        "by the mapping of docs/import.md.",
    )
    imp.add_argument("paths", nargs="+", metavar="FILE... OUT", help="input files, then the collection to write")
    imp.add_argument("--format", help="ase.io format of every input (default: guessed per file)")
    imp.add_argument("--index", default=":", help="which structures of each file, as ase.io's index (default ':')")
    imp.add_argument("--group-by", metavar="KEY", help="one record per value of KEY (an info / key-value pair)")
    imp.add_argument("--order-by", metavar="KEY", help="a group's frames in the order of this integer KEY")
    imp.add_argument(
        "--index-column", metavar="KEY", action="append", default=[], help="own index column from KEY (repeatable)"
    )
    imp.add_argument("--skip-bad", action="store_true", help="count and report bad structures instead of stopping")
    imp.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    imp.add_argument("--quiet", action="store_true", help="no progress on stderr")
    args = parser.parse_args(argv)
    if len(args.paths) < 2:
        parser.error("import needs at least one FILE and OUT")
    *files, out = args.paths
    try:
        report = import_files(
            files,
            out,
            format=args.format,
            index=args.index,
            group_by=args.group_by,
            order_by=args.order_by,
            index_columns=args.index_column,
            skip_bad=args.skip_bad,
            overwrite=args.overwrite,
            progress=not args.quiet,
        )
    except KeyboardInterrupt:
        print(f"\npython -m mrec import: interrupted; {out} is as it was", file=sys.stderr)
        return 130
    except BadInput as e:
        print(f"python -m mrec import: {e}", file=sys.stderr)
        return 4
    except Refused as e:
        print(f"python -m mrec import: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"python -m mrec import: {e}", file=sys.stderr)
        return 3
    print(report, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
