"""The hypothesis strategies for random einsums, defined once for every test that draws them.

* `einsum_specs()`: float64 grammar cases (spec, shapes, seed): 1-4 operands of rank <= 4,
  letters repeated inside an operand, size-1 broadcast dimensions, '...' anywhere in a term,
  implicit or explicit output (which may sum the '...').
* `einsum_cases()`: typed cases (spec, shapes, dtypes, seed): 1-6 tiny operands, now and
  then a size-0 index, float32/float64/complex128 (sometimes mixed), spaces in the spec, and
  optionally the same operand passed twice.
"""

import numpy as np
from hypothesis import strategies as st

SPEC_LETTERS = "abcdAB"  # upper case too, to exercise numpy's implicit output order
CASE_LETTERS = "abcdeAB"
DTYPES = (np.float32, np.float64, np.complex128)


@st.composite
def einsum_specs(draw):
    """A spec (string) and operand shapes that numpy.einsum accepts.

    1-4 operands of rank <= 4; letters may repeat inside an operand; a labelled
    dimension may be 1 where the letter is larger elsewhere; an operand may
    carry '...' (anywhere in its subscripts) covering a suffix of a common
    broadcast shape, with some of those dimensions 1; the output is implicit
    or an explicit random subset of the letters in random order, which may
    leave out the '...' (its dimensions are then summed).
    """
    sizes = {c: draw(st.integers(1, 4)) for c in SPEC_LETTERS}
    # a small pool repeats letters
    pool = draw(st.permutations(SPEC_LETTERS))[
        : draw(st.integers(1, len(SPEC_LETTERS)))
    ]  # small pools repeat
    n_ops = draw(st.integers(1, 4))
    ell_shape = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    terms, shapes, any_ellipsis = [], [], False
    for _ in range(n_ops):
        letters = draw(st.lists(st.sampled_from(pool), max_size=3))
        use_ell = draw(st.booleans())
        ell_rank = draw(st.integers(0, len(ell_shape))) if use_ell else 0
        ell_rank = min(ell_rank, 4 - len(letters))
        ell = ell_shape[len(ell_shape) - ell_rank :]
        ell = tuple(1 if draw(st.integers(0, 3)) == 0 else d for d in ell)  # size-1 broadcast
        shape_of_letter = {c: 1 if draw(st.integers(0, 5)) == 0 else sizes[c] for c in set(letters)}
        dims = [shape_of_letter[c] for c in letters]
        if use_ell:
            any_ellipsis = True
            pos = draw(st.integers(0, len(letters)))
            term = "".join(letters[:pos]) + "..." + "".join(letters[pos:])
            shape = tuple(dims[:pos]) + ell + tuple(dims[pos:])
        else:
            term = "".join(letters)
            shape = tuple(dims)
        terms.append(term)
        shapes.append(shape)
    spec = ",".join(terms)
    if draw(st.booleans()):  # explicit output: a random subset, in random order
        used = sorted({c for t in terms for c in t if c != "."})
        out = list(draw(st.permutations(used)))[: draw(st.integers(0, len(used)))]
        if any_ellipsis and draw(st.integers(0, 3)) > 0:
            out.insert(draw(st.integers(0, len(out))), "...")
        spec += "->" + "".join(out)
    seed = draw(st.integers(0, 2**16))
    return spec, shapes, seed


@st.composite
def einsum_cases(draw, max_operands=6, dtypes=DTYPES, same_first_two=False):
    """(spec, shapes, dtypes, seed) that numpy.einsum accepts.

    Every operand has rank <= 3 and dimensions <= 3, so arrays stay tiny.
    """
    pool = "".join(draw(st.permutations(CASE_LETTERS)))[: draw(st.integers(1, 5))]
    sizes = {c: draw(st.integers(1, 3)) for c in pool}
    if draw(st.integers(0, 5)) == 0:  # now and then one index is empty
        sizes[draw(st.sampled_from(pool))] = 0
    ell_full = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))  # the broadcast '...' shape
    n_ops = draw(st.integers(2 if same_first_two else 1, max_operands))
    terms, shapes, any_ellipsis = [], [], False
    for k in range(n_ops):
        if same_first_two and k == 1:  # the same tensor passed again, same subscripts
            terms.append(terms[0])
            shapes.append(shapes[0])
            continue
        use_ell = bool(ell_full) and draw(st.booleans())
        ell_rank = draw(st.integers(0, len(ell_full))) if use_ell else 0  # ranks differ per operand
        letters = draw(st.lists(st.sampled_from(pool), max_size=3 - ell_rank))  # repeats allowed
        ell = ell_full[len(ell_full) - ell_rank :]
        ell = tuple(1 if draw(st.integers(0, 3)) == 0 else d for d in ell)  # size-1 broadcast
        dim = {c: 1 if draw(st.integers(0, 4)) == 0 else sizes[c] for c in set(letters)}
        dims = tuple(dim[c] for c in letters)
        if use_ell:
            any_ellipsis = True
            pos = draw(st.integers(0, len(letters)))
            terms.append("".join(letters[:pos]) + "..." + "".join(letters[pos:]))
            shapes.append(dims[:pos] + ell + dims[pos:])
        else:
            terms.append("".join(letters))
            shapes.append(dims)
    spec = ",".join(terms)
    if draw(st.booleans()):  # explicit output: a random subset in random order
        used = sorted({c for t in terms for c in t if c != "."})
        out = list(draw(st.permutations(used)))[: draw(st.integers(0, len(used)))]
        if any_ellipsis:
            out.insert(draw(st.integers(0, len(out))), "...")
        spec += "->" + "".join(out)
    if draw(st.integers(0, 3)) == 0:  # mixed dtypes: numpy's promotion decides the result
        types = tuple(draw(st.sampled_from(dtypes)) for _ in range(n_ops))
        if same_first_two:
            types = (types[0], types[0]) + types[2:]
    else:
        types = (draw(st.sampled_from(dtypes)),) * n_ops
    if draw(st.integers(0, 7)) == 0:  # spaces are part of numpy's grammar
        spec = " ".join(spec)
        spec = spec.replace(". . .", "...").replace("- >", "->")
    return spec, tuple(shapes), types, draw(st.integers(0, 2**32 - 1))


def random_array(rng, shape, dtype):
    a = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)
