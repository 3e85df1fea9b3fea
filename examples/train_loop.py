"""A tiny CPU training loop that survives being killed: kill it (Ctrl-C, kill -9, a preempted
job) and run it again, it goes on from its last checkpoint — model, optimizer and the exact
position in the data — so every sample of every epoch is seen exactly once.

    python examples/train_loop.py /tmp/train-demo            # run; kill it whenever you like
    python examples/train_loop.py /tmp/train-demo            # ... and it resumes
    python examples/train_loop.py /tmp/train-demo --workers 0  # resume with other num_workers too

It writes a small dataset the first time (y = 3 * x + 1 with noise), then trains a linear model
on it for a few epochs with shuffling, saving a checkpoint every few steps.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np
import torch

from shardwright import StreamingDataLoader, StreamingDataset, optimize


def sample(i: int) -> dict:
    rng = np.random.default_rng(i)
    x = rng.uniform(-1, 1, size=4).astype(np.float32)
    return {"i": i, "x": x, "y": np.float32(3 * x.sum() + 1 + rng.normal(0, 0.01))}


def save_atomically(path: str, checkpoint: dict) -> None:
    tmp = path + ".tmp"
    torch.save(checkpoint, tmp)
    os.replace(tmp, path)  # a kill during the save leaves the previous checkpoint intact


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workdir")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--items", type=int, default=20_000)
    args = parser.parse_args()
    data = os.path.join(args.workdir, "data")
    ckpt = os.path.join(args.workdir, "checkpoint.pt")
    seen_log = os.path.join(args.workdir, "seen.jsonl")  # to check exactly-once afterwards

    # Exactly once and resumable too: rerunning after a kill finishes the dataset.
    if not os.path.exists(os.path.join(data, "index.json")):
        optimize(sample, list(range(args.items)), data, chunk_size=500, num_workers=2)

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    dataset = StreamingDataset(data, shuffle=True, seed=1234)
    loader = StreamingDataLoader(dataset, batch_size=64, num_workers=args.workers)
    if os.path.exists(ckpt):
        state = torch.load(ckpt, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        loader.load_state_dict(json.loads(state["loader"]))
        with open(seen_log, "r+") as f:
            f.truncate(state["seen_bytes"])  # forget batches logged after the checkpoint
        print(f"resumed at epoch {loader.current_epoch}")

    step = 0
    while loader.current_epoch < args.epochs:
        epoch = loader.current_epoch
        for batch in loader:
            loss = torch.nn.functional.mse_loss(model(batch["x"]).squeeze(1), batch["y"].float())
            opt.zero_grad()
            loss.backward()
            opt.step()
            with open(seen_log, "a") as f:
                f.write(json.dumps([epoch, batch["i"].tolist()]) + "\n")
            step += 1
            if step % 20 == 0:
                save_atomically(
                    ckpt,
                    {
                        "model": model.state_dict(),
                        "optimizer": opt.state_dict(),
                        "loader": json.dumps(loader.state_dict()),
                        "seen_bytes": os.path.getsize(seen_log),
                    },
                )
        save_atomically(
            ckpt,
            {
                "model": model.state_dict(),
                "optimizer": opt.state_dict(),
                "loader": json.dumps(loader.state_dict()),
                "seen_bytes": os.path.getsize(seen_log),
            },
        )
        print(f"epoch {epoch} done, loss {loss.item():.4f}, weights {model.weight.data.numpy().round(2)}")

    counts: dict[int, list[int]] = {}
    with open(seen_log) as f:
        for line in f:
            epoch, ids = json.loads(line)
            counts.setdefault(epoch, []).extend(ids)
    for epoch, ids in sorted(counts.items()):
        ok = sorted(ids) == list(range(args.items))
        print(f"epoch {epoch}: {len(ids)} samples, each exactly once: {ok}")


if __name__ == "__main__":
    main()
