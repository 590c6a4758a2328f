package main

// familyPatches lists, per version family, how an x86_64 Linux build
// differs from the wasm32-wasi build of the same Ruby where the difference
// is the preprocessor's and so cannot be seen in the wasm DWARF: the thread
// implementation (thread_none on wasm, thread_pthread on Linux), what
// SIZEOF_VALUE decides, and USE_FLONUM (off on wasm32). Each entry says
// why; the x86_64 definitions are those of the family's thread_pthread.h,
// vm_core.h and include/ruby headers.
var familyPatches = map[string][]patch{
	"3.2": patches32,
	"3.3": patches33, // 3.4's #if differences and 3.3.8's own; checked against 3.3.8's table
	"3.4": patches34,
	"4.0": patches40,
}

// pthreadTypes: on wasm the native thread types are pointers to opaque
// structs (include/ruby/thread_native.h, __wasi__); on Linux they are
// glibc's x86_64 pthread types.
var pthreadTypes = []patch{
	typedef("rb_nativethread_lock_t", "blob(40,8)", "pthread_mutex_t on glibc x86_64 (40 bytes)"),
	typedef("rb_nativethread_cond_t", "blob(48,8)", "pthread_cond_t on glibc x86_64 (48 bytes)"),
	typedef("rb_nativethread_id_t", "u64", "pthread_t is an unsigned long on glibc"),
}

// flonum: USE_FLONUM is on when SIZEOF_VALUE >= SIZEOF_DOUBLE, so the
// wasm32 build has none and its special constants are the other set of
// include/ruby/internal/special_consts.h.
func flonum(qnil, qtrue, qundef int64) []patch {
	const why = "USE_FLONUM (x86_64) special constant; the wasm32 build has no flonums"
	return []patch{
		answer("enum", "RUBY_Qfalse", 0x00, why),
		answer("enum", "RUBY_Qnil", qnil, why),
		answer("enum", "RUBY_Qtrue", qtrue, why),
		answer("enum", "RUBY_Qundef", qundef, why),
		answer("enum", "RUBY_IMMEDIATE_MASK", 0x07, why),
		answer("enum", "RUBY_FIXNUM_FLAG", 0x01, why),
		answer("enum", "RUBY_FLONUM_MASK", 0x03, why),
		answer("enum", "RUBY_FLONUM_FLAG", 0x02, why),
		answer("enum", "RUBY_SYMBOL_FLAG", 0x0c, why),
		answer("enum", "RUBY_SPECIAL_SHIFT", 8, why),
	}
}

func join(lists ...[]patch) []patch {
	var out []patch
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// shapes32: shape.h makes shape IDs and attribute indexes 32-bit and keeps
// the shape ID in RBasic's flags when SIZEOF_UINT64_T <= SIZEOF_VALUE; on
// wasm32 they are 16-bit and generic ivar tables carry the ID (3.2 to 3.4).
var shapes32 = []patch{
	typedef("attr_index_t", "u32", "shape.h: uint32_t when SIZEOF_UINT64_T <= SIZEOF_VALUE"),
	typedef("shape_id_t", "u32", "shape.h: uint32_t when SIZEOF_UINT64_T <= SIZEOF_VALUE"),
	drop("gen_ivtbl", "shape_id", "only when !SHAPE_IN_BASIC_FLAGS (32-bit VALUE)"),
}

// value64 are what else SIZEOF_VALUE == 8 and x86_64's unaligned word
// access decide (none of them moves a table field; they keep the whole
// re-layout true, see TestCrossCheck33).
var value64 = []patch{
	typedef("rb_float_value_type", "double", "internal/numeric.h: a double when SIZEOF_DOUBLE <= SIZEOF_VALUE"),
	insert("rb_id_item", "key", "id_table.c: a separate collision flag when SIZEOF_VALUE == 8",
		members("collision int")...),
	body("vm_ifunc_argc", "internal/imemo.h: 16-bit bit-fields only when SIZEOF_INT * 2 > SIZEOF_VALUE",
		members("min int; max int")...),
	pack("rb_io_internal_buffer", "PACKED_STRUCT_UNALIGNED: packed where unaligned word access is allowed (x86_64, not wasm32)"),
	pack("iseq_catch_table", "PACKED_STRUCT_UNALIGNED"),
	// thread_sync.c packs a Queue and a SizedQueue (3.1 to 3.4's sources;
	// 4.0.0's are not at hand: taken as 3.4's, as the Queue's members are,
	// its items still in the Array que): a SizedQueue's num_waiting_push
	// right after the Queue's 36 bytes, at 36, its max at 56.
	pack("rb_queue", "thread_sync.c: PACKED_STRUCT_UNALIGNED"),
	pack("rb_szqueue", "thread_sync.c: PACKED_STRUCT_UNALIGNED"),
}

// sched34 are thread_pthread.h's M:N scheduler structs of 3.3 and 3.4
// (thread_none.h's are empty; VM_CHECK_MODE is 0). 4.0.0's differ
// (sched40).
var sched34 = []patch{
	body("rb_thread_sched", "thread_pthread.h's per-ractor scheduler",
		members(`lock_ rb_nativethread_lock_t; running ptr; is_running bool;
			is_running_timeslice bool; enable_mn_threads bool; readyq ccan_list_head;
			readyq_cnt int; grq_node ccan_list_node`)...),
	body("rb_thread_sched_item", "thread_pthread.h's per-thread scheduler state",
		members(`node {ubf ccan_list_node; readyq ccan_list_node; timeslice_threads ccan_list_node;
			running_threads ccan_list_node; zombie_threads ccan_list_node};
			waiting_reason {flags int; data {timeout u64; fd int; result int}; node ccan_list_node};
			finished bool; malloc_stack bool; context_stack ptr; context ptr`)...),
	body("rb_native_thread", "thread_pthread.h's (thread_none.h's holds only thread_id); Linux has RB_THREAD_T_HAS_NATIVE_ID (tid), a union of the condvars (glibc) and USE_SIGALTSTACK",
		members(`serial u32; vm ptr; thread_id rb_nativethread_id_t; tid int; running_thread ptr;
			cond union{intr rb_nativethread_cond_t; readyq rb_nativethread_cond_t};
			altstack ptr; nt_context ptr; dedicated int; machine_stack_maxsize size_t`)...),
}

var mainAltstack = insert("rb_vm_struct", "ractor", "#ifdef USE_SIGALTSTACK (Linux has it, wasi not)",
	members("main_altstack ptr")...)

var arTable8 = retype("ar_table_struct", "pairs", "ar_table_pair[8]", "RHASH_AR_TABLE_MAX_SIZE is SIZEOF_VALUE")

var patches32 = join(pthreadTypes, flonum(0x04, 0x14, 0x24), shapes32, value64, []patch{
	body("rb_thread_sched", "3.2's thread_pthread.h (the GVL as a per-ractor scheduler, before M:N)",
		members(`running ptr; lock rb_nativethread_lock_t; readyq ccan_list_head; timer ptr;
			timer_err int; switch_cond rb_nativethread_cond_t; switch_wait_cond rb_nativethread_cond_t;
			need_yield int; wait_yield int`)...),
	body("rb_thread_sched_item", "3.2's thread_pthread.h",
		members(`node union{ubf ccan_list_node; readyq ccan_list_node}`)...),
	body("rb_native_thread", "3.2's thread_pthread.h; Linux has RB_THREAD_T_HAS_NATIVE_ID (tid), a union of the condvars (glibc) and USE_SIGALTSTACK",
		members(`id int; thread_id rb_nativethread_id_t; tid int; running_thread ptr;
			cond union{intr rb_nativethread_cond_t; readyq rb_nativethread_cond_t}; altstack ptr`)...),
	mainAltstack,
	drop("RClass", "ptr", "only when SIZE_POOL_COUNT == 1 (wasm32); 64-bit has 5 size pools and embeds the class extension after RClass"),
	retype("rb_objspace", "size_pools", "rb_size_pool_t[5]", "SIZE_POOL_COUNT is 5 on 64-bit, 1 on wasm32"),
	retype("ractor_newobj_cache", "size_pool_caches", "rb_ractor_newobj_size_pool_cache_t[5]", "SIZE_POOL_COUNT"),
	drop("rb_classext_struct", "shape_id", "only when !SHAPE_IN_BASIC_FLAGS (32-bit VALUE)"),
	arTable8,
})

// sched40 are 4.0.0's thread_pthread.h scheduler structs: 3.4's, with
// the event serial a thread's wait and its scheduler item gained (facts
// from 4.0.0's headers as rbspy's bindings of 4.0.0 give them; the peer
// core of 4.0.0 had its thread's status and name 8 bytes after the
// table made with 3.4's).
var sched40 = []patch{
	sched34[0], // rb_thread_sched
	schedItem40("4.0.0's thread_pthread.h: 3.4's, with event_serial in the wait's data and in the item",
		"ubf ccan_list_node; readyq ccan_list_node; timeslice_threads ccan_list_node; running_threads ccan_list_node; zombie_threads ccan_list_node"),
	sched34[2], // rb_native_thread
}

// schedItem40 is 4.0's rb_thread_sched_item, whose node (the lists a
// thread is on) has the members given.
func schedItem40(why, node string) patch {
	return body("rb_thread_sched_item", why,
		members(`node {`+node+`};
			waiting_reason {flags int; data {timeout u64; event_serial u32; fd int; result int}; node ccan_list_node};
			event_serial u32; finished bool; malloc_stack bool; context_stack ptr; context ptr`)...)
}

var patches40 = join(pthreadTypes, flonum(0x04, 0x14, 0x24), value64, sched40, []patch{
	drop("RBasic", "shape_id", "only when SIZEOF_VALUE < 8 (RBASIC_SHAPE_ID_FIELD); on 64-bit the shape ID is the top 32 bits of flags"),
	drop("rb_vm_struct.ractor.sync", "barrier_waiting", "only without pthreads (the VM barrier is the scheduler's with them)"),
	drop("rb_vm_struct.ractor.sync", "barrier_cnt", "only without pthreads"),
	drop("rb_vm_struct.ractor.sync", "barrier_complete_cond", "only without pthreads"),
	drop("rb_vm_struct.ractor.sync", "barrier_release_cond", "only without pthreads"),
	insert("rb_vm_struct.ractor", "sync", "the ractor scheduler exists with pthreads only; 3.4's members and 4.0.0's barrier_ractor and barrier_lock_rec (the peer core of 4.0.0 had vm->objspace 16 bytes after the table made without them)",
		members(`sched {lock rb_nativethread_lock_t; lock_owner ptr; locked bool; cond rb_nativethread_cond_t;
			snt_cnt u32; dnt_cnt u32; running_cnt u32; max_cpu u32; grq ccan_list_head; grq_cnt u32;
			running_threads ccan_list_head; timeslice_threads ccan_list_head; zombie_threads ccan_list_head;
			timeslice_wait_inf bool; barrier_complete_cond rb_nativethread_cond_t;
			barrier_release_cond rb_nativethread_cond_t; barrier_waiting bool; barrier_waiting_cnt u32;
			barrier_serial u32; barrier_ractor ptr; barrier_lock_rec u32}`)...),
	mainAltstack,
	drop("rb_ractor_sync", "wakeup_cond", "only without pthreads (with them a ractor waits on its threads' condvars)"),
	arTable8,
})

var patches34 = join(pthreadTypes, flonum(0x04, 0x14, 0x24), shapes32, value64, sched34, []patch{
	drop("rb_vm_struct.ractor.sync", "barrier_waiting", "only without pthreads (vm_core.h: #ifndef RUBY_THREAD_PTHREAD_H)"),
	drop("rb_vm_struct.ractor.sync", "barrier_cnt", "only without pthreads"),
	drop("rb_vm_struct.ractor.sync", "barrier_cond", "only without pthreads"),
	drop("rb_ractor_sync", "cond", "only without pthreads (ractor_core.h: #ifndef RUBY_THREAD_PTHREAD_H)"),
	mainAltstack,
	arTable8,
	jit34,
})

// jit34 are the instruction sequence body's JIT fields with YJIT and RJIT
// (vm_core.h's #if USE_RJIT || USE_YJIT, as our x86_64 builds configure
// them when rustc is at hand; the wasm build has no JIT). None holds a
// VALUE the dump reads: the body is read up to the first of them.
var jit34 = insert("rb_iseq_constant_body", "mandatory_only_iseq", "USE_YJIT and USE_RJIT (x86_64 with rustc; the wasm build has no JIT)",
	members(`jit_entry ptr; jit_entry_calls u64; jit_exception ptr; jit_exception_calls u64;
		rjit_blocks u64; yjit_payload ptr; yjit_calls_at_interv u64`)...)

// patches33 are 3.4's and what 3.3.8 (our build) has that 3.3.3 (the
// wasm package) has not.
var patches33 = join(patches34, []patch{
	insert("rb_vm_struct", "constant_cache", "3.3.7 and later (a patch release's field; the wasm package is 3.3.3): see releases.go",
		members("inserting_constant_cache_id u64")...),
})
