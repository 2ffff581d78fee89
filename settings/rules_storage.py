"""Where the model's files may live, and what their paths must be for the servers to open them.

Guards `serving.model.path` (for vllm-pd the Hugging Face cache snapshot of the named model), and the
weights, checkpoints and tokenizers of every backend: in a bucket the servers are granted, outside the
prefixes they write and the bucket the program creates and deletes, and, for a tokenizer in the image,
a path Linux opens.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from settings import storage_names
from settings.base import ProblemsError
from settings.refused import RefusedClass
from settings.rules_backends import Backend

if TYPE_CHECKING:
    from settings.model import StackConfig

# The longest part of a file path Linux opens, in bytes (NAME_MAX, include/uapi/linux/limits.h).
NAME_MAX = 255


# huggingface_hub's cache (v1.28.0 src/huggingface_hub/file_download.py; the vLLM image pins 1.33.0,
# workloads/upstream_readers.py): a repository's folder is repo_folder_name, "models" and the repo id's
# parts joined by constants.REPO_ID_SEPARATOR "--", and each revision a folder snapshots/<commit> whose
# name matches REGEX_COMMIT_HASH, ^[0-9a-f]{40}$ (a branch or tag lives in refs/, never in snapshots/).
HF_COMMIT = re.compile(r"[0-9a-f]{40}")


def hf_cache_folder(repo_id: str) -> str:
    return "--".join(["models", *repo_id.split("/")])


def check_model_snapshot(config: StackConfig) -> None:
    """vllm-pd loads gs://<weightsBucket>/<path> as the model the stack names (backends/vllm_pd.py)."""
    if config.serving.backend is not Backend.VLLM_PD:
        return
    model = config.serving.model
    folder = hf_cache_folder(model.name)
    *_, repo, snapshots, commit = ["", "", "", *model.path.rstrip("/").split("/")]
    if repo == folder and snapshots == "snapshots" and HF_COMMIT.fullmatch(commit):
        return
    if repo.startswith("models--") and repo != folder:
        reason = f"is a snapshot of another repository ({repo}), not of serving.model.name {model.name!r}"
    elif repo == folder and snapshots == "snapshots":
        reason = f"names revision {commit!r}, not a full 40-character commit (a branch or tag is no snapshot folder)"
    else:
        reason = f"is not a Hugging Face cache snapshot of serving.model.name {model.name!r}"
    raise ValueError(
        f"serving.model.path {model.path!r} {reason}: vLLM loads gs://<weightsBucket>/<path> as that model's "
        "folder, which huggingface_hub's cache names by repository and pins by commit (file_download.py "
        f"repo_folder_name, REGEX_COMMIT_HASH); allowed: {folder}/snapshots/<40-hex commit>, directly or under a folder"
    )


def _in_writable_prefix(path: str) -> str | None:
    return next((p for p in storage_names.WRITABLE_PREFIXES if f"{path.rstrip('/')}/".startswith(p)), None)


def check_model_storage(config: StackConfig) -> None:
    """Weights, checkpoints and tokenizers where the servers can read them and nothing deletes them."""
    serving, problems = config.serving, []
    model, backend = serving.model, serving.backend
    bucket = model.weights_bucket
    sax_bucket = config.names.sax_bucket(config.project)
    writable = " and ".join(storage_names.WRITABLE_PREFIXES)
    if bucket is not None and bucket == sax_bucket:
        problems.append(
            f"serving.model.weightsBucket {bucket!r} is the Saxml admin bucket this stack creates with "
            "serving.backend saxml (<project>-<namePrefix>-sax, workloads/saxml.py) and deletes with everything "
            "in it (force_destroy) on destroy; allowed: a bucket the program does not create"
        )
    prefix = _in_writable_prefix(model.path) if model.path and backend is not Backend.SAXML else None
    if prefix is not None:
        problems.append(
            f"serving.model.path {model.path!r} is inside {prefix}, a prefix the model servers may write and "
            f"delete in (workloads/bucket_access.py); allowed: a path outside {writable}"
        )
    checkpoint = serving.saxml.checkpoint
    if backend is Backend.SAXML and checkpoint != "None":
        object_path = checkpoint.removeprefix("gs://").partition("/")[2]
        prefix = _in_writable_prefix(object_path)
        if prefix is not None:
            problems.append(
                f"serving.saxml.checkpoint {checkpoint!r} is inside {prefix}, a prefix the model servers may "
                f"write and delete in (workloads/bucket_access.py); allowed: a checkpoint outside {writable}"
            )
    if backend is Backend.JETSTREAM and not model.path.strip("/ "):
        # workloads/jetstream.py checkpoint_uri: MaxEngine's load_parameters_path is
        # gs://<weightsBucket>/<path>, the unscanned checkpoint's items folder; the bucket's root is none.
        problems.append(
            f"serving.model.path {model.path!r} is blank: JetStream loads the MaxText checkpoint's items from "
            "gs://<weightsBucket>/<path> (MaxEngine's load_parameters_path), not the bucket's root; allowed: the "
            "unscanned checkpoint's items folder, e.g. final/unscanned/gemma_7b-it/0/checkpoints/0/items"
        )
    tokenizer = serving.jetstream.tokenizer_path
    if backend is Backend.JETSTREAM and tokenizer != tokenizer.strip():
        # A path is read as written (seqio's SentencePieceVocabulary opens it with tf.io.gfile): a
        # blank one or one edged with spaces names no file in the image or the bucket.
        problems.append(
            f"serving.jetstream.tokenizerPath {tokenizer!r} is blank or edged with spaces, which the tokenizer's "
            "loader reads as part of the file name; allowed: a path in the image (e.g. assets/tokenizer.llama2) "
            "or gs://<weightsBucket>/<path>, without spaces around it"
        )
    long_name = next((part for part in tokenizer.split("/") if len(part.encode("utf-8")) > NAME_MAX), None)
    if backend is Backend.JETSTREAM and not tokenizer.startswith("gs://") and long_name is not None:
        # A file in the image: the kernel opens no path with a component over NAME_MAX bytes
        # (include/uapi/linux/limits.h; ENAMETOOLONG), and every server fails loading its tokenizer.
        problems.append(
            f"serving.jetstream.tokenizerPath has a part {long_name[:32]!r}... of {len(long_name.encode()):,} bytes; "
            f"allowed: a path in the image whose every part is at most {NAME_MAX} bytes (NAME_MAX)"
        )
    if backend is Backend.JETSTREAM and tokenizer.startswith("gs://"):
        # MaxEngine hands tokenizer_path to JetStream's SentencePieceTokenizer (MaxText maxengine.py
        # get_tokenizer, build_tokenizer), which loads it through seqio's SentencePieceVocabulary with
        # tf.io.gfile, so a gs:// tokenizer is read with the servers' identity, granted the weights bucket only.
        tokenizer_bucket, _, object_path = tokenizer.removeprefix("gs://").partition("/")
        if (
            shape := storage_names.object_path_problem(object_path) or ("no object" if not object_path else None)
        ) is not None:
            problems.append(
                f"serving.jetstream.tokenizerPath {tokenizer[:80]!r} names an object that has {shape}; "
                f"{storage_names.OBJECT_ALLOWED}"
            )
        elif tokenizer_bucket != bucket:
            problems.append(
                f"serving.jetstream.tokenizerPath {tokenizer!r} is in bucket {tokenizer_bucket!r}, but the model "
                f"servers are granted read access to serving.model.weightsBucket {bucket!r} only, so loading it "
                "would be refused; allowed: a tokenizer inside serving.model.weightsBucket, or a path in the image"
            )
        elif (prefix := _in_writable_prefix(object_path)) is not None:
            problems.append(
                f"serving.jetstream.tokenizerPath {tokenizer!r} is inside {prefix}, a prefix the model servers may "
                f"write and delete in (workloads/bucket_access.py); allowed: a tokenizer outside {writable}"
            )
    if problems:
        raise ProblemsError(problems)


REFUSED: tuple[RefusedClass, ...] = (
    RefusedClass(
        "a blank checkpoint path on the MaxText path",
        check_model_storage,
        {"serving": {"model": {"path": ""}}},
        "serving.model.path",
        "the unscanned checkpoint's items folder",
        stack="jetstream-v5e",
    ),
    RefusedClass(
        "a tokenizer path that is blank or edged with spaces",
        check_model_storage,
        {"serving": {"jetstream": {"tokenizerPath": "  "}}},
        "serving.jetstream.tokenizerPath",
        "without spaces around it",
        stack="jetstream-v5e",
    ),
    RefusedClass(
        "model path that is no Hugging Face snapshot of the named model",
        check_model_snapshot,
        {
            "serving": {
                "model": {"path": "models--Qwen--Qwen3.5-397B-A17B/snapshots/ea5b4f81096f3901c91dea97f81324302495781d"}
            }
        },
        "serving.model.path",
        "allowed: models--Qwen--Qwen3.5-397B-A17B-FP8/snapshots/<40-hex commit>",
    ),
    RefusedClass(
        "weights bucket the program creates and deletes",
        check_model_storage,
        {"serving": {"model": {"weightsBucket": "example-tpu-project-saxml-v5e-sax"}}},
        "serving.model.weightsBucket",
        "allowed: a bucket the program does not create",
        stack="saxml-v5e",
    ),
    RefusedClass(
        "weights inside a prefix the servers may write",
        check_model_storage,
        {"serving": {"model": {"path": "pathways-scratch/llama2-70b/unscanned/checkpoints/0/items"}}},
        "serving.model.path",
        "allowed: a path outside xla_cache/ and pathways-scratch/",
        stack="jetstream-v5e",
    ),
    RefusedClass(
        "Saxml checkpoint inside a prefix the servers may write",
        check_model_storage,
        {
            "serving": {
                "model": {"weightsBucket": "example-weights"},
                "saxml": {
                    "modelPath": "saxml.server.pax.lm.params.lm_cloud.LLaMA70BFP16TPUv5e32",
                    "checkpoint": "gs://example-weights/xla_cache/llama70b",
                },
            }
        },
        "serving.saxml.checkpoint",
        "allowed: a checkpoint outside xla_cache/ and pathways-scratch/",
        stack="saxml-v5e",
    ),
    RefusedClass(
        "tokenizer in a bucket the servers are never granted",
        check_model_storage,
        {"serving": {"jetstream": {"tokenizerPath": "gs://example-tokenizers/tokenizer.llama2"}}},
        "serving.jetstream.tokenizerPath",
        "allowed: a tokenizer inside serving.model.weightsBucket",
        stack="jetstream-v5e",
    ),
    RefusedClass(
        "tokenizer inside a prefix the servers may write",
        check_model_storage,
        {"serving": {"jetstream": {"tokenizerPath": "gs://example-jetstream-checkpoints/pathways-scratch/tok.llama2"}}},
        "serving.jetstream.tokenizerPath",
        "allowed: a tokenizer outside xla_cache/ and pathways-scratch/",
        stack="jetstream-v5e",
    ),
    RefusedClass(
        "tokenizer in the image with a path part longer than Linux opens (NAME_MAX)",
        check_model_storage,
        {"serving": {"jetstream": {"tokenizerPath": "assets/" + "t" * 256}}},
        "serving.jetstream.tokenizerPath",
        "every part is at most 255 bytes",
        stack="jetstream-v5e",
    ),
    RefusedClass(
        "tokenizer in the bucket that is no object name",
        check_model_storage,
        {"serving": {"jetstream": {"tokenizerPath": "gs://example-jetstream-checkpoints/tok//tokenizer.llama2"}}},
        "serving.jetstream.tokenizerPath",
        "no empty segment",
        stack="jetstream-v5e",
    ),
)
