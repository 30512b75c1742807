"""Call-heavy pure-Python workload: recursion, method calls through a small
class hierarchy, closures and generators.  Deep, frequently changing Python
stacks; almost no native code of its own.

Usage: python call_heavy.py LOOPS    (one loop is a fixed unit of work)
"""
import sys


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


class Shape:
    def __init__(self, size):
        self.size = size

    def area(self):
        return self.size * self.size

    def scaled(self, k):
        return type(self)(self.size * k)


class Square(Shape):
    pass


class Circle(Shape):
    def area(self):
        return 3.14159 * super().area()


def make_adder(k):
    def add(x):
        return x + k
    return add


def walk(depth):
    """A chain of nested calls `depth` deep, each calling a method on the way."""
    if depth == 0:
        return Circle(1.0).scaled(2).area()
    return Square(depth).area() % 7 + walk(depth - 1)


def numbers(n):
    for i in range(n):
        yield i


def unit():
    total = fib(15)
    shapes = [Square(i) if i % 2 else Circle(i) for i in range(200)]
    for s in shapes:
        total += s.scaled(2).area()
    add = make_adder(3)
    for i in numbers(1500):
        total += add(i)
    for _ in range(20):
        total += walk(40)
    return total


def main(loops):
    total = 0
    for _ in range(loops):
        total += unit()
    return total


if __name__ == "__main__":
    main(int(sys.argv[1]))
