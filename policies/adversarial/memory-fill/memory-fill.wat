;; Hostile guest: `score` grows its memory to 1,000 pages (~64 MB, just under a 64 MiB
;; limit) and then `memory.fill`s all of it, over and over, forever. Fuel is charged per
;; instruction, not per byte, so each ~64 MB memset costs a few units of fuel: only the
;; wall-clock (epoch) deadline stops it. Rust cannot be made to emit this loop reliably,
;; hence WAT. Built by the root build.rs (wat + wit-component, world selection-policy).
(module
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 4096))
  ;; describe: policy-info {inputs: load, filters: false, wants-commits: false} at 16.
  (data (i32.const 16) "\02\00\00")
  ;; result<_, policy-error>::ok at 32; an empty result<list<f64>, _>::ok at 48.
  (data (i32.const 32) "\00")
  (data (i32.const 48) "\00\00\00\00\00\00\00\00\00\00\00\00")
  ;; A bump allocator for the canonical ABI (the host copies parameters in through it).
  (func (export "cabi_realloc") (param $old i32) (param $old_size i32) (param $align i32) (param $size i32) (result i32)
    (local $p i32)
    (local.set $p (i32.and (i32.add (global.get $heap) (i32.sub (local.get $align) (i32.const 1)))
                           (i32.sub (i32.const 0) (local.get $align))))
    (global.set $heap (i32.add (local.get $p) (local.get $size)))
    (if (i32.gt_u (global.get $heap) (i32.mul (memory.size) (i32.const 65536)))
      (then (drop (memory.grow (i32.add (i32.const 1)
        (i32.shr_u (i32.sub (global.get $heap) (i32.mul (memory.size) (i32.const 65536))) (i32.const 16)))))))
    (local.get $p))
  (func (export "switchyard:policy/policy@0.2.0#describe") (result i32) (i32.const 16))
  (func (export "switchyard:policy/policy@0.2.0#configure") (param i32 i32) (result i32) (i32.const 32))
  (func (export "switchyard:policy/policy@0.2.0#filter") (param i32 i32 i32 i32 i32 i32 i64 i32 i32 i64 i32 i32 i32 i32 i32 i32) (result i32) unreachable)
  (func (export "switchyard:policy/policy@0.2.0#on-selected")
    (param i32 i32 i32 i32 i32 i32 i64 i32 i32 i64 i64 i32))
  (func (export "switchyard:policy/policy@0.2.0#score") (param i32 i32 i32 i32 i32 i32 i64 i32 i32 i64 i32 i32 i32 i32 i32 i32) (result i32)
    (local $grow i32)
    (local $byte i32)
    ;; Grow to 1,000 pages; if a growth is refused with -1, try half as much, and so on
    ;; (under `trap_on_grow_failure` a refusal traps instead; 1,000 pages fit in 64 MiB).
    (local.set $grow (i32.sub (i32.const 1000) (memory.size)))
    (block $grown
      (loop $try
        (br_if $grown (i32.le_s (local.get $grow) (i32.const 0)))
        (br_if $grown (i32.ne (memory.grow (local.get $grow)) (i32.const -1)))
        (local.set $grow (i32.shr_u (local.get $grow) (i32.const 1)))
        (br $try)))
    ;; Fill the whole memory, a different byte each time round, forever.
    (loop $forever
      (memory.fill (i32.const 0) (local.get $byte) (i32.mul (memory.size) (i32.const 65536)))
      (local.set $byte (i32.add (local.get $byte) (i32.const 1)))
      (br $forever))
    unreachable)
)
