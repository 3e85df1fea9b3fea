"""``shardwright verify DIR|URL``: exit 0 when the dataset is intact, 1 when damage was found
(each damaged chunk named), 2 when it is not a dataset or the command was misused."""

from __future__ import annotations

import argparse
import json

from ..reader.verify import verify
from .options import parse_storage_options


def add_verify_command(sub) -> None:
    cmd = sub.add_parser(
        "verify",
        help="check a published dataset: index.json and every chunk's presence, size, checksum and structure",
    )
    cmd.add_argument("output_dir")
    cmd.add_argument("--json", action="store_true", help="print the report as JSON")
    cmd.add_argument("--storage-options", help="JSON dict of boto3 client arguments for s3:// datasets")
    cmd.set_defaults(func=run_verify)


def run_verify(args: argparse.Namespace) -> int:

    report = verify(args.output_dir, storage_options=parse_storage_options(args.storage_options))
    if args.json:
        print(json.dumps(report.to_json(), indent=1))
    else:
        for damage in report.damaged:
            print(f"damaged:  {damage}")
        print(report.summary())
    return 0 if report.ok else 1
