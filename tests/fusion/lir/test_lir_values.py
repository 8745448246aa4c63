"""Symbolic values: arithmetic, simplification, evaluation, text round trip."""

import pytest

from vpuc.fusion.lir.values import Value, parse, product

D1, D2 = Value.sym("D1"), Value.sym("D2")


def test_static_values_behave_like_ints():
    v = Value(7) * 3 - 1
    assert v == 20 and v.static == 20 and v.is_static
    assert Value(21) // 8 == 2 and Value(21) % 8 == 5
    assert not Value(0) and Value(0) == 0


def test_polynomials_normalize():
    assert D1 * 16 - D1 * 16 == 0
    assert (D1 + D2) * 2 == 2 * D2 + 2 * D1
    assert str(-16 * D1 * D2) == "-16*D1*D2"
    assert str(D2 - D2 % 8) == "D2 - (D2 % 8)"
    assert product([D1, 4, D2]) == 4 * D1 * D2


def test_division_and_remainder_by_constants():
    assert (8 * D1) // 8 == D1 and (8 * D1) % 8 == 0
    main = (D2 // 8) * 8
    assert str(main) == "8*(D2 // 8)" and main // 8 == D2 // 8
    for d in range(1, 30):
        env = {"D2": d}
        assert main.evaluate(env) == d - d % 8 and (D2 % 8).evaluate(env) == d % 8
    with pytest.raises(ValueError):
        D1 // D2


@pytest.mark.parametrize("value", [Value(0), Value(-5), D1, -16 * D1 * D2 + 3, D2 % 8,
                                   8 * (D2 // 8), (D1 * D2) % 8 - D1, -(D2 % 8)])
def test_text_round_trip(value):
    assert parse(str(value)) == value


def test_evaluate_needs_every_symbol():
    assert (16 * D1 + D2).evaluate({"D1": 2, "D2": 3}) == 35
    with pytest.raises(KeyError):
        D1.evaluate({})
    assert D1.symbols() == {"D1"} and (D1 % 4 + D2).symbols() == {"D1", "D2"}
