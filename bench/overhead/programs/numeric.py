"""Numeric pure-Python workload: a small Mandelbrot image and a dense
list-of-lists matrix product, in floats, in the evaluator loop (few calls).

Usage: python numeric.py LOOPS    (one loop is a fixed unit of work)
"""
import sys


def mandelbrot(width, height, max_iter):
    inside = 0
    for py in range(height):
        y0 = py / height * 2.0 - 1.0
        for px in range(width):
            x0 = px / width * 3.0 - 2.0
            x = y = 0.0
            i = 0
            while x * x + y * y <= 4.0 and i < max_iter:
                x, y = x * x - y * y + x0, 2.0 * x * y + y0
                i += 1
            if i == max_iter:
                inside += 1
    return inside


def matmul(a, b):
    bt = list(zip(*b))
    return [[sum(x * y for x, y in zip(row, col)) for col in bt] for row in a]


def unit():
    n = 24
    a = [[(i * n + j) % 7 / 7.0 for j in range(n)] for i in range(n)]
    c = matmul(a, a)
    return mandelbrot(40, 30, 40) + c[1][2]


def main(loops):
    total = 0.0
    for _ in range(loops):
        total += unit()
    return total


if __name__ == "__main__":
    main(int(sys.argv[1]))
