;; A well-formed component of another world: it exports `run`, not the policy interface.
;; Built by the root build.rs against world.wit (wat + wit-component).
(module
  (memory (export "memory") 1)
  (func (export "run") (result i32) (i32.const 42))
)
