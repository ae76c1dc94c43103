"""Token vectors from subword vectors: `spacy_maral.first_subword.v1`."""
from typing import Callable, Tuple, cast

import numpy
from thinc.api import Model
from thinc.types import Floats2d, Ragged

from spacy_maral.util import registry


@registry.layers("spacy_maral.first_subword.v1")
def first_subword_pooling() -> Model[Ragged, Floats2d]:
    """Token vector = the vector of its first subword; zeros for a token with none.

    Like thinc's reduce_first, but a token that the transformer's tokenizer gives no
    subword (a whitespace token under a WordPiece tokenizer) gets a zero vector instead
    of an error.
    """
    return Model("first_subword", _first_subword_forward)


def _first_subword_forward(model: Model, Xr: Ragged, is_train: bool) -> Tuple[Floats2d, Callable]:
    ops = model.ops
    lengths = ops.to_numpy(Xr.lengths).astype("int64")
    starts = numpy.concatenate([[0], numpy.cumsum(lengths)[:-1]]).astype("int64")
    present = numpy.flatnonzero(lengths > 0)
    data = cast(Floats2d, Xr.dataXd)
    Y = ops.alloc2f(lengths.shape[0], data.shape[1])
    if present.shape[0]:
        Y[ops.asarray1i(present)] = data[ops.asarray1i(starts[present])]

    def backprop(dY: Floats2d) -> Ragged:
        dX = ops.alloc2f(data.shape[0], data.shape[1])
        if present.shape[0]:
            dX[ops.asarray1i(starts[present])] = dY[ops.asarray1i(present)]
        return Ragged(dX, Xr.lengths)

    return Y, backprop
