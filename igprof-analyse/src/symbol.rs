//! How functions are shown to users: demangled native symbols and Python locations.
//!
//! Native names in a dump are the symbols of `.symtab`/`.dynsym`, mangled for C++ and
//! Rust (docs/dump-format.md, "What a function is"); they are demangled here. Python
//! functions are recognised by their file, a Python source (`*.py`, `*.pyw`) or a
//! pseudo-file such as `<frozen importlib._bootstrap>` or `<string>`.

use crate::profile::{Function, Profile};

/// Whether a function of `file` is Python code (then its start is a line number).
pub fn is_python_file(file: &str) -> bool {
    file.ends_with(".py")
        || file.ends_with(".pyw")
        || (file.starts_with('<') && file.ends_with('>'))
}

/// `name` demangled if it is a Rust (legacy `_ZN...E` or v0 `_R...`) or C++ (`_Z...`)
/// symbol, otherwise unchanged. Rust hashes (`::h0123456789abcdef`) are left out.
pub fn demangle(name: &str) -> String {
    if let Ok(rust) = rustc_demangle::try_demangle(name) {
        return format!("{rust:#}");
    }
    if name.starts_with("_Z") || name.starts_with("__Z") {
        if let Ok(symbol) = cpp_demangle::Symbol::new(name.as_bytes()) {
            if let Ok(text) = symbol.demangle() {
                return text;
            }
        }
    }
    name.to_string()
}

/// How one function is shown in reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    /// The function name: demangled for native code, the qualified name for Python.
    pub name: String,
    /// Where it is: `file:first-line` for Python, the object's full path for native code.
    pub location: String,
    /// Whether the function is Python code.
    pub python: bool,
}

impl Label {
    /// How `function` of `profile` is shown.
    pub fn of(profile: &Profile, function: &Function) -> Label {
        let file = profile.file(function.file);
        if is_python_file(file) {
            Label {
                name: function.name.clone(),
                location: format!("{file}:{}", function.start),
                python: true,
            }
        } else {
            Label {
                name: demangle(&function.name),
                location: file.to_string(),
                python: false,
            }
        }
    }

    /// One-line form: `name (file:line)` for Python, `name  (object path)` for native
    /// code.
    pub fn line(&self) -> String {
        if self.python {
            format!("{} ({})", self.name, self.location)
        } else {
            format!("{}  ({})", self.name, self.location)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_cpp_and_rust() {
        assert_eq!(demangle("_ZN5space3fooEibc"), "space::foo(int, bool, char)");
        assert_eq!(
            demangle("_ZNSt6vectorIiSaIiEE9push_backERKi"),
            "std::vector<int, std::allocator<int> >::push_back(int const&)"
        );
        assert_eq!(
            demangle("_ZN3std2rt10lang_start17h0123456789abcdefE"),
            "std::rt::lang_start"
        );
        assert_eq!(demangle("_RNvCs1234_7mycrate3foo"), "mycrate::foo");
    }

    #[test]
    fn leaves_plain_and_odd_names_alone() {
        for name in [
            "deflate_slow",
            "@?0x13adab",
            "main",
            "_Z",
            "_Zgarbage(",
            "",
            "<module>",
        ] {
            assert_eq!(demangle(name), name);
        }
    }

    #[test]
    fn python_files() {
        assert!(is_python_file("/work/examples/compress.py"));
        assert!(is_python_file("<frozen importlib._bootstrap>"));
        assert!(!is_python_file("/usr/lib/x86_64-linux-gnu/libz.so.1"));
        assert!(!is_python_file("ls"));
    }

    #[test]
    fn label_lines() {
        let mut profile = Profile::new();
        let py = profile.intern_file("/work/x.py").unwrap();
        let so = profile.intern_file("/lib/libfoo.so").unwrap();
        let f = profile.intern_function("Klass.method", py, 12).unwrap();
        let g = profile
            .intern_function("_ZN3foo3barEv", so, 0x1000)
            .unwrap();
        assert_eq!(
            Label::of(&profile, profile.function(f)).line(),
            "Klass.method (/work/x.py:12)"
        );
        assert_eq!(
            Label::of(&profile, profile.function(g)).line(),
            "foo::bar()  (/lib/libfoo.so)"
        );
    }
}
