"""``shardwright verify DIR|URL``: exit 0 when the dataset is intact, 1 when damage was found
(each damaged chunk named), 2 when it is not a dataset or the command was misused."""

from __future__ import annotations

import json

from ..reader.verify import verify


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
    report = verify(output_dir, storage_options=storage_options)
    if as_json:
        print(json.dumps(report.to_json(), indent=1))
    else:
        for damage in report.damaged:
            print(f"damaged:  {damage}")
        print(report.summary())
    return 0 if report.ok else 1
