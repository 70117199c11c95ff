;; Hostile guest: `score` grows a function table by 4,096 slots at a time until the host
;; refuses (with `trap_on_grow_failure`, the refusal traps). Rust cannot emit
;; `table.grow`, hence WAT. Built by the root build.rs (wat + wit-component).
(module
  (memory (export "memory") 2)
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
  (table $t 1 funcref)
  (func (export "switchyard:policy/policy@0.2.0#score") (param i32 i32 i32 i32 i32 i32 i64 i32 i32 i64 i32 i32 i32 i32 i32 i32) (result i32)
    (loop $more
      (br_if $more (i32.ne (table.grow $t (ref.null func) (i32.const 4096)) (i32.const -1))))
    ;; Reached only if a refused growth returned -1 instead of trapping.
    unreachable)
)
