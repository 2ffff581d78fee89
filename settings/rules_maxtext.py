"""The checkpoint and the tokenizer JetStream serves are the MaxText model the stack names.

MaxEngine builds `serving.jetstream.maxtextModel`'s arrays from its configs/models/<name>.yml and
restores the checkpoint at serving.model.path into them (MaxText jetstream-v0.2.2 maxengine.py
`load_params`, checkpointing.py `load_params_from_path`): a checkpoint of another model fails to
restore on every server once the slice is provisioned. Its tokenizer's ids index the model's
embedding table: a vocabulary of another model encodes prompts into ids that mean other words, or
beyond the table, and the answers are noise with no error. Neither the checkpoint nor a tokenizer
in a bucket can be read offline; the model's stated size and name and the tokenizers the image
carries can (domain/maxtext_models.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from domain import maxtext_models
from settings.refused import RefusedClass

if TYPE_CHECKING:
    from settings.model import StackConfig

# How far a stated parameter count may be from the one the MaxText dimensions give: model cards round
# (gemma-7b's card says 7B; its dimensions give 8.54 billion) but never by a quarter, while MaxText's
# nearest models of one family differ by half or more (llama2-7b 6.7, llama2-13b 13.0 billion).
SIZE_TOLERANCE = 1.25


def check_identity(config: StackConfig, models: dict[str, maxtext_models.MaxTextModel]) -> None:
    """Every contradiction between the model the stack serves and maxtextModel, at once."""
    jet, served = config.serving.jetstream, config.serving.model
    name, model = jet.maxtext_model, models[jet.maxtext_model]
    problems: list[str] = []
    label = served.label.lower()
    if label in models and label != name:
        problems.append(
            f"serving.model.name {served.name!r} is MaxText's {label}, but serving.jetstream.maxtextModel is "
            f"{name!r}: MaxEngine builds {name}'s arrays and restores the checkpoint into them; allowed: one model"
            f" in both, maxtextModel {label!r} for a {label} checkpoint"
        )
    billions, _ = served.size
    computed = model.parameters() / 1e9
    if not computed / SIZE_TOLERANCE <= billions <= computed * SIZE_TOLERANCE:
        near = sorted(
            other
            for other, shape in models.items()
            if shape.parameters() / 1e9 / SIZE_TOLERANCE <= billions <= shape.parameters() / 1e9 * SIZE_TOLERANCE
        )
        hint = f"; by size the checkpoint may be {', '.join(near)}" if near else ""
        problems.append(
            f"serving.model.parametersBillions {billions:g} (model {served.name!r}) is not {name}: MaxText's "
            f"configs/models/{name}.yml makes {computed:.1f} billion parameters, and a checkpoint of another "
            f"model fails to restore into its arrays on every server; allowed: about {computed:.1f} (within a "
            f"quarter) with a {name} checkpoint at serving.model.path, or the maxtextModel it was converted "
            f"for{hint}"
        )
    bundled = maxtext_models.bundled_tokenizer(jet.tokenizer_path)
    if bundled is not None:
        pieces = maxtext_models.BUNDLED_TOKENIZERS[bundled]
        if not maxtext_models.tokenizer_fits(model, pieces):
            fitting = [
                path
                for path, count in maxtext_models.BUNDLED_TOKENIZERS.items()
                if maxtext_models.tokenizer_fits(model, count)
            ]
            allowed = (
                f"{fitting[0]}, the image's tokenizer of {name}'s vocabulary"
                if fitting
                else f"the tokenizer {name} was trained with, from the weights bucket (none in the image has its "
                f"{model.vocab} ids)"
            )
            problems.append(
                f"serving.jetstream.tokenizerPath {jet.tokenizer_path!r} is a vocabulary of {pieces:,} pieces, and "
                f"{name}'s embedding has {model.vocab:,} rows: prompts would be encoded into another model's ids "
                f"and the answers would be noise, with no error; allowed: {allowed}"
            )
    if problems:
        raise ValueError("; ".join(problems))


def _check(config: StackConfig) -> None:
    # The rows' rule: the identity check as check_maxtext calls it, with the image's models.
    models = maxtext_models.models_for(config.versions.jetstream_maxengine_image)
    if models is not None and config.serving.jetstream.maxtext_model in models:
        check_identity(config, models)


REFUSED: tuple[RefusedClass, ...] = (
    RefusedClass(
        "JetStream checkpoint of another MaxText model (its stated size)",
        _check,
        {"serving": {"model": {"name": "llama2-7b-chat", "parametersBillions": 7}}},
        "serving.model.parametersBillions",
        "about 69.0 (within a quarter)",
        stack="jetstream-v5e",
    ),
    RefusedClass(
        "JetStream model named as one MaxText model, served as another",
        _check,
        {"serving": {"model": {"name": "llama2-13b"}}},
        "serving.model.name",
        "maxtextModel 'llama2-13b'",
        stack="jetstream-v5e",
    ),
    RefusedClass(
        "JetStream tokenizer of another model's vocabulary",
        _check,
        {"serving": {"jetstream": {"tokenizerPath": "assets/tokenizer.gemma"}}},
        "serving.jetstream.tokenizerPath",
        "assets/tokenizer.llama2",
        stack="jetstream-v5e",
    ),
)
