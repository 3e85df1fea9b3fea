"""``shardwright k8s manifest``: a Kubernetes Indexed Job that runs one ``optimize()`` over N pods.

Every pod runs the same command. Kubernetes gives each pod ``JOB_COMPLETION_INDEX`` (its
rank); the manifest adds the pod count (``SHARDWRIGHT_NUM_NODES``) and the Job's name
(``SHARDWRIGHT_JOB_NAME``), from which a pod's host identity is ``k8s:{job}/{index}``:
stable when a pod of the same index is restarted (preemption, eviction, a crash), so the
new pod takes its predecessor's leases and claims over at once and resumes its shards from
their committed chunks. The pod that finishes last publishes ``index.json`` (or run
``shardwright merge OUTPUT_DIR`` once every index succeeded).

- ``completionMode: Indexed``, ``completions`` = ``parallelism`` = N by default;
- ``backoffLimitPerIndex``: a failing index is retried that many times, the others go on;
- ``podFailurePolicy``: a pod that failed because of a disruption (preemption, eviction,
  node drain: the ``DisruptionTarget`` condition) is ignored, so it is not counted against
  the limit; ``podReplacementPolicy: Failed`` starts a replacement only once the old pod is
  gone (two pods of one index never run at once);
- credentials come from a Secret, by reference (``envFrom: secretRef``): never inline;
- ``resources`` from ``--cpu`` / ``--memory``.

The manifest is JSON (which ``kubectl apply -f`` reads like YAML). See docs/kubernetes.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import UsageError
from ..secrets import has_url_credentials, is_credential_path, is_credential_pointer_name, is_secret_env_name

NUM_NODES_VAR = "SHARDWRIGHT_NUM_NODES"
JOB_NAME_VAR = "SHARDWRIGHT_JOB_NAME"
OUTPUT_DIR_VAR = "SHARDWRIGHT_OUTPUT_DIR"
CONTAINER = "optimize"
# \Z, not $: "$" also matches before a trailing newline, so `--name $'ab\n'` passed (trust round 12)
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
_DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}\Z)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*\Z")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti)?\Z")
MAX_COMPLETIONS = 100_000  # Kubernetes' own limit for Indexed Jobs


@dataclass(frozen=True)
class JobSpec:
    """What ``shardwright k8s manifest`` asks for, validated by :meth:`validate`."""

    name: str
    image: str
    command: list[str]
    completions: int
    parallelism: int | None = None  # None: all at once
    backoff_limit_per_index: int = 3
    max_failed_indexes: int | None = None
    cpu: str | None = None
    memory: str | None = None
    secret: str | None = None  # a Secret whose keys become env vars (AWS_ACCESS_KEY_ID, ...)
    output_dir: str | None = None
    shared_output: bool = False
    env: dict[str, str] = field(default_factory=dict)
    service_account: str | None = None
    namespace: str | None = None

    def validate(self) -> JobSpec:
        if not _DNS_LABEL.match(self.name) or len(self.name) > 52:
            raise UsageError(
                f"--name {self.name!r} is not a valid Job name: lowercase letters, digits and '-', at most 52 "
                "characters (Kubernetes adds the index to pod names)"
            )
        if not self.image.strip():
            raise UsageError("--image is empty; give the container image that has your script and shardwright")
        if not self.command:
            raise UsageError(
                "give the command each pod runs after `--`, e.g. shardwright k8s manifest --completions 4 "
                "--image IMG -- python prepare.py"
            )
        if not 1 <= self.completions <= MAX_COMPLETIONS:
            raise UsageError(f"--completions must be 1..{MAX_COMPLETIONS:,}; got {self.completions}")
        if self.parallelism is not None and not 1 <= self.parallelism <= self.completions:
            raise UsageError(f"--parallelism must be 1..{self.completions} (the completions); got {self.parallelism}")
        if self.backoff_limit_per_index < 0:
            raise UsageError(f"--backoff-limit-per-index must be 0 or more; got {self.backoff_limit_per_index}")
        for name, value in (("--cpu", self.cpu), ("--memory", self.memory)):
            if value is not None and not _QUANTITY.match(value):
                raise UsageError(f"{name} {value!r} is not a Kubernetes quantity (e.g. 2, 500m, 8Gi)")
        if self.secret is not None and not _DNS_LABEL.match(self.secret):
            raise UsageError(f"--secret {self.secret!r} is not a valid Secret name")
        if self.max_failed_indexes is not None and not 0 <= self.max_failed_indexes <= self.completions:
            raise UsageError(
                f"--max-failed-indexes must be 0..{self.completions} (the completions); got {self.max_failed_indexes}"
            )
        if self.namespace is not None and (not _DNS_LABEL.match(self.namespace) or len(self.namespace) > 63):
            raise UsageError(
                f"--namespace {self.namespace!r} is not a valid namespace: lowercase letters, digits and '-' "
                "(a DNS-1123 label, at most 63 characters)"
            )
        if self.service_account is not None and not _DNS_SUBDOMAIN.match(self.service_account):
            raise UsageError(
                f"--service-account {self.service_account!r} is not a valid ServiceAccount name: lowercase letters, "
                "digits, '-' and '.' (a DNS-1123 subdomain, at most 253 characters)"
            )
        for key, value in self.env.items():
            _check_env(key, value)
        if self.output_dir is not None and has_url_credentials(self.output_dir):
            raise UsageError(
                "--output-dir holds a URL with credentials (user:password@ or a signed query), which would be "
                "written into the manifest in plain text; give the URL without them and put the credentials in a "
                "Secret (--secret NAME)"
            )
        if self.output_dir is not None:
            local = "://" not in self.output_dir
            if local and not self.shared_output and self.completions > 1:
                raise UsageError(
                    f"--output-dir {self.output_dir!r} is a local path: each pod would write its own disk. Use a "
                    "bucket URL (s3://...), or --shared-output if every pod mounts the same volume there"
                )
        return self


def _check_env(key: str, value: str) -> None:
    """One ``--env`` pair, refused if it would put a secret in the manifest (which is kept and
    shown: kubectl get -o yaml) or clash with the manifest's own variables. The messages never
    repeat the value."""
    if not _ENV_NAME.match(key):
        raise UsageError(f"--env {key!r} is not an environment variable name")
    if key in (NUM_NODES_VAR, JOB_NAME_VAR, "JOB_COMPLETION_INDEX"):
        raise UsageError(f"--env {key} is set by the manifest itself; leave it out")
    if key == OUTPUT_DIR_VAR:  # a second entry of the name, which Kubernetes lets win over --output-dir's
        raise UsageError(
            f"--env {key} is set by the manifest from --output-dir; pass --output-dir instead (it is checked and "
            "recorded on the Job)"
        )
    in_a_secret = (
        f"put it in a Secret (kubectl create secret generic NAME --from-literal={key}=...) and pass --secret NAME"
    )
    if has_url_credentials(value):  # trust round 10: FOO=https://user:pass@host/x was written as it was
        raise UsageError(
            f"--env {key}=... holds a URL with credentials (user:password@ or a signed query), which would be "
            f"written into the manifest in plain text; {in_a_secret}"
        )
    if not is_secret_env_name(key) or is_credential_path(key, value):
        return  # GOOGLE_APPLICATION_CREDENTIALS=/var/secrets/key.json points at a mounted Secret
    if is_credential_pointer_name(key):
        raise UsageError(
            f"--env {key}=... is not an absolute file path of plain characters (ASCII letters, digits, '.', '_', "
            "'@', '-'; a key pasted inline?) and would write a secret into the manifest in plain text; put the credential file in a Secret, mount it in the pods, and set "
            f"{key} to the mounted file's absolute path (e.g. /var/secrets/key.json)"
        )
    raise UsageError(f"--env {key}=... would write a secret into the manifest in plain text; {in_a_secret}")


def job_manifest(spec: JobSpec) -> dict:
    """The Indexed Job (a plain dict, as ``kubectl apply`` reads it)."""
    spec = spec.validate()
    labels = {"app.kubernetes.io/name": "shardwright", "shardwright/job": spec.name}
    env = [
        {"name": NUM_NODES_VAR, "value": str(spec.completions)},
        {"name": JOB_NAME_VAR, "value": spec.name},
        # say where Python's output goes at once: `kubectl logs -f` shows progress as it happens
        {"name": "PYTHONUNBUFFERED", "value": "1"},
    ]
    if spec.output_dir is not None:
        env.append({"name": OUTPUT_DIR_VAR, "value": spec.output_dir})
    env += [{"name": k, "value": v} for k, v in sorted(spec.env.items())]
    container: dict = {"name": CONTAINER, "image": spec.image, "command": list(spec.command), "env": env}
    if spec.secret is not None:
        container["envFrom"] = [{"secretRef": {"name": spec.secret}}]  # by reference: never inline
    resources: dict = {}
    if spec.cpu is not None:
        resources.setdefault("requests", {})["cpu"] = spec.cpu
    if spec.memory is not None:
        resources.setdefault("requests", {})["memory"] = spec.memory
        resources.setdefault("limits", {})["memory"] = spec.memory
    if resources:
        container["resources"] = resources
    pod_spec: dict = {
        "restartPolicy": "Never",  # the Job controller replaces a failed pod (a podFailurePolicy needs Never)
        "terminationGracePeriodSeconds": 60,  # SIGTERM: optimize() commits what it has and exits
        "containers": [container],
    }
    if spec.service_account is not None:
        pod_spec["serviceAccountName"] = spec.service_account
    job_spec: dict = {
        "completionMode": "Indexed",
        "completions": spec.completions,
        "parallelism": spec.parallelism or spec.completions,
        "backoffLimitPerIndex": spec.backoff_limit_per_index,
        "podReplacementPolicy": "Failed",
        "podFailurePolicy": {
            "rules": [
                # preemption, eviction, a drained node: not the pod's fault, not counted
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            ]
        },
        "template": {"metadata": {"labels": labels}, "spec": pod_spec},
    }
    if spec.max_failed_indexes is not None:
        job_spec["maxFailedIndexes"] = spec.max_failed_indexes
    metadata: dict = {"name": spec.name, "labels": labels}
    if spec.namespace is not None:
        metadata["namespace"] = spec.namespace
    if spec.output_dir is not None:
        metadata["annotations"] = {"shardwright/output-dir": spec.output_dir}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": job_spec}
