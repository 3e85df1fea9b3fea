"""``shardwright verify DIR|URL``: exit 0 when the dataset is intact, 1 when damage was found
(each damaged chunk named), 2 when it is not a dataset or the command was misused.

``shardwright diff A B``: exit 0 when the two datasets hold the same items (same digest), 1 when
they differ (the differing item ranges named) or cannot be compared, 2 as above."""

from __future__ import annotations

import json

from .options import parse_storage_options


def add_verify_command(sub) -> None:
    cmd = sub.add_parser(
        "verify",
        help="check a published dataset: index.json and every chunk's presence, size, checksum and structure",
    )
    cmd.add_argument("output_dir")
    cmd.add_argument("--json", action="store_true", help="print the report as JSON")
    cmd.add_argument(
        "--storage-options",
        help="JSON dict of storage options (boto3 client arguments for s3://; gs:// and az://: docs/clouds.md)",
    )


def run_verify(output_dir: str, storage_options: dict | None, as_json: bool) -> int:
    # the reader imports torch (its Dataset base): only `verify` pays for it, not `--help`
    from ..reader.verify import verify

    report = verify(output_dir, storage_options=storage_options)
    if as_json:
        print(json.dumps(report.to_json(), indent=1))
    else:
        for damage in report.damaged:
            print(f"damaged:  {damage}")
        print(report.summary())
    return 0 if report.ok else 1


def add_diff_command(sub) -> None:
    cmd = sub.add_parser("diff", help="are two published datasets the same (digest), and which items differ")
    cmd.add_argument("a")
    cmd.add_argument("b")
    cmd.add_argument("--json", action="store_true", help="print the comparison as JSON")
    cmd.add_argument("--storage-options", help="JSON dict of storage options for both (docs/clouds.md)")
    cmd.add_argument("--other-storage-options", help="JSON dict of B's storage options, when they differ from A's")
    cmd.set_defaults(func=run_diff)


def run_diff(args) -> int:
    from ..reader.diff import diff  # the reader imports torch: only `diff` pays for it

    found = diff(
        args.a,
        args.b,
        storage_options=parse_storage_options(args.storage_options),
        other_storage_options=parse_storage_options(args.other_storage_options),
    )
    if args.json:
        print(json.dumps(found.to_json(), indent=1))
    else:
        print("\n".join(found.summary()))
    return 0 if found.same else 1
