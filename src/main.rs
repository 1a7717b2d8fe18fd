//! The `safeprune` binary.

fn main() {
    let policy = safeprune::policy::Policy::builtin();
    print!("{}", policy.to_yaml());
}
