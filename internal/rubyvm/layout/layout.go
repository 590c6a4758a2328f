// Package layout describes where things are inside the Ruby VM's C structs:
// field offsets, struct sizes and the enum constants the walkers need.
//
// Every offset rbscope uses is a field of Layout, named once, with a struct
// tag that says where DWARF keeps it. The same tags drive both the run-time
// reader (FromDWARF, for a target whose Ruby carries debug info) and
// tools/layoutgen, which writes the built-in tables for stripped Rubies.
//
// Tag grammar: `dwarf:"KIND:WHAT[|WHAT...][,optional]"` where KIND is
//
//	off     byte offset of a member path (struct.member.member); after
//	        "->" the path goes on in the struct the member points at,
//	        and the offset is from that struct's start
//	bitoff  bit offset of a bit-field member from the start of its struct
//	bits    bit width of a bit-field member
//	size    byte size of a struct, union or typedef
//	count   element count of an array member
//	enum    value of an enumerator
//
// Alternatives separated by | are tried in order (struct names and members
// moved between Ruby versions). An optional field is -1 when absent. A field
// with a `macro:"N"` tag and no dwarf tag holds a C preprocessor constant,
// which DWARF does not keep: N for every version family, or, for a macro
// that changed, `macro:"N,3.1=M"` (M for the families named, N for the
// others).
//
// A `need:"census"` or `need:"dump"` tag says that only that feature (and
// those built on it) needs the field; untagged fields are the stack's,
// which every feature needs. A build lacking a census or dump field still
// reads stacks (see Build and Layout.Supports).
package layout

// Layout holds the offsets and constants of one Ruby build configuration.
type Layout struct {
	// Family is the Ruby version family ("3.1") the layout is for; Source
	// says where it came from ("dwarf:/path" or "table").
	Family string
	Source string
	// Checked lists the Ruby releases a built-in table was generated from
	// or checked against ("3.4.5"); empty for a layout read from DWARF.
	Checked string
	// Release is the patch release ("3.1.7") a built-in table was chosen
	// for, its family's table with the fields that release moved
	// (layouts.ForRelease); empty for the family's table itself and for a
	// layout read from DWARF.
	Release string
	// Missing lists the fields this build lacks that some feature (not
	// the stack's) needs; Supports tells a feature whether it can run.
	Missing []Missing

	// rb_vm_t: the ractors (3.0+) or, before ractors, the living threads,
	// the main thread and the GVL
	VMRactorSet        int64 `dwarf:"off:rb_vm_struct.ractor.set,optional"`
	VMRactorMainRactor int64 `dwarf:"off:rb_vm_struct.ractor.main_ractor,optional"`
	VMRactorMainThread int64 `dwarf:"off:rb_vm_struct.ractor.main_thread|rb_vm_struct.main_thread"`
	VMLivingThreads    int64 `dwarf:"off:rb_vm_struct.living_threads,optional"`
	VMGVLOwner         int64 `dwarf:"off:rb_vm_struct.gvl.owner,optional"`
	// VMTrapCmd is vm->trap_list.cmd, the Ruby-level handler of each
	// signal (0: none; exec does not wake a program with a signal it traps).
	VMTrapCmd  int64 `dwarf:"off:rb_vm_struct.trap_list.cmd,optional"`
	VMObjspace int64 `dwarf:"off:rb_vm_struct.objspace|rb_vm_struct.gc.objspace" need:"census"`

	// rb_ractor_t (3.0+)
	RactorVMListNode  int64 `dwarf:"off:rb_ractor_struct.vmlr_node,optional"`
	RactorThreadsSet  int64 `dwarf:"off:rb_ractor_struct.threads.set,optional"`
	RactorThreadsCnt  int64 `dwarf:"off:rb_ractor_struct.threads.cnt,optional"`
	RactorRunningEC   int64 `dwarf:"off:rb_ractor_struct.threads.running_ec,optional"`
	RactorGVLOwner    int64 `dwarf:"off:rb_ractor_struct.threads.gvl.owner|rb_ractor_struct.threads.sched.running,optional"`
	RactorThreadsMain int64 `dwarf:"off:rb_ractor_struct.threads.main,optional"`

	// ccan list nodes (struct list_node / ccan_list_node)
	ListNodeNext int64 `dwarf:"off:list_node.next|ccan_list_node.next"`

	// rb_thread_t
	ThreadListNode int64 `dwarf:"off:rb_thread_struct.lt_node|rb_thread_struct.vmlt_node"`
	ThreadSelf     int64 `dwarf:"off:rb_thread_struct.self"`
	ThreadEC       int64 `dwarf:"off:rb_thread_struct.ec"`
	// thread_id is the pthread_t, read for the TID when the thread keeps
	// none of its own (2.7; see target's pthread TID offset)
	ThreadPthread   int64 `dwarf:"off:rb_thread_struct.thread_id,optional"`
	ThreadTID       int64 `dwarf:"off:rb_thread_struct.tid,optional"`
	ThreadNT        int64 `dwarf:"off:rb_thread_struct.nt,optional"`
	NativeThreadTID int64 `dwarf:"off:rb_native_thread.tid,optional"`
	// NativeThreadPthread is the native thread's pthread_t (3.2+): the
	// C library's struct pthread has the TID from the moment of clone,
	// before the new thread writes its own tid
	NativeThreadPthread int64 `dwarf:"off:rb_native_thread.thread_id,optional"`
	ThreadStatusBit     int64 `dwarf:"bitoff:rb_thread_struct.status"`
	ThreadStatusLen     int64 `dwarf:"bits:rb_thread_struct.status"`
	ThreadName          int64 `dwarf:"off:rb_thread_struct.name"`

	// enum rb_thread_status
	ThreadRunnable       int64 `dwarf:"enum:THREAD_RUNNABLE"`
	ThreadStopped        int64 `dwarf:"enum:THREAD_STOPPED"`
	ThreadStoppedForever int64 `dwarf:"enum:THREAD_STOPPED_FOREVER"`
	ThreadKilled         int64 `dwarf:"enum:THREAD_KILLED"`

	// rb_execution_context_t
	ECVMStack     int64 `dwarf:"off:rb_execution_context_struct.vm_stack"`
	ECVMStackSize int64 `dwarf:"off:rb_execution_context_struct.vm_stack_size"`
	ECCFP         int64 `dwarf:"off:rb_execution_context_struct.cfp"`
	// ECThreadPtr is the context's thread: the layout check's "the main
	// thread's context points back at it"
	ECThreadPtr int64 `dwarf:"off:rb_execution_context_struct.thread_ptr,optional"`

	// rb_control_frame_t
	CFPSize int64 `dwarf:"size:rb_control_frame_struct"`
	CFPPC   int64 `dwarf:"off:rb_control_frame_struct.pc"`
	CFPSP   int64 `dwarf:"off:rb_control_frame_struct.sp" need:"dump"`
	CFPIseq int64 `dwarf:"off:rb_control_frame_struct.iseq"`
	CFPSelf int64 `dwarf:"off:rb_control_frame_struct.self"`
	CFPEP   int64 `dwarf:"off:rb_control_frame_struct.ep"`

	// CFPPublishedFirst is 1 where vm_push_frame makes the new control
	// frame the thread's current one (ec->cfp) before it writes the
	// frame's fields (2.7; 3.1 and later write the frame first): a
	// thread caught in that window has an innermost frame that still
	// holds what an earlier frame left in its slot.
	CFPPublishedFirst int64 `macro:"0,2.7=1"`

	// environment data below ep (vm_core.h macros)
	EnvIndexMECref  int64 `macro:"-2"`
	EnvIndexSpecval int64 `macro:"-1"`
	EnvIndexFlags   int64 `macro:"0"`

	// enum vm_frame_env_flags
	FrameMagicMask   int64 `dwarf:"enum:VM_FRAME_MAGIC_MASK"`
	FrameMagicMethod int64 `dwarf:"enum:VM_FRAME_MAGIC_METHOD"`
	FrameMagicBlock  int64 `dwarf:"enum:VM_FRAME_MAGIC_BLOCK"`
	FrameMagicClass  int64 `dwarf:"enum:VM_FRAME_MAGIC_CLASS"`
	FrameMagicTop    int64 `dwarf:"enum:VM_FRAME_MAGIC_TOP"`
	FrameMagicCFunc  int64 `dwarf:"enum:VM_FRAME_MAGIC_CFUNC"`
	FrameMagicIFunc  int64 `dwarf:"enum:VM_FRAME_MAGIC_IFUNC"`
	FrameMagicEval   int64 `dwarf:"enum:VM_FRAME_MAGIC_EVAL"`
	FrameMagicRescue int64 `dwarf:"enum:VM_FRAME_MAGIC_RESCUE"`
	FrameMagicDummy  int64 `dwarf:"enum:VM_FRAME_MAGIC_DUMMY"`
	EnvFlagLocal     int64 `dwarf:"enum:VM_ENV_FLAG_LOCAL"`
	// VM_FRAME_FLAG_FINISH marks the first frame a call of vm_exec runs
	// (a C function calling back into Ruby): where Ruby frames and the
	// native frames of the exec loop line up (stack --native).
	FrameFlagFinish int64 `dwarf:"enum:VM_FRAME_FLAG_FINISH"`

	// rb_iseq_t and its constant body
	IseqBody       int64 `dwarf:"off:rb_iseq_struct.body"`
	BodyType       int64 `dwarf:"off:rb_iseq_constant_body.type"`
	BodyParentIseq int64 `dwarf:"off:rb_iseq_constant_body.parent_iseq"`
	// builtin methods written in Ruby that backtraces show as C methods
	// (3.4+: Primitive.attr! :c_trace, such as YJIT's Array#each)
	BodyBuiltinAttrs     int64 `dwarf:"off:rb_iseq_constant_body.builtin_attrs,optional"`
	BuiltinAttrCTrace    int64 `dwarf:"enum:BUILTIN_ATTR_C_TRACE,optional"`
	BodyLocalIseq        int64 `dwarf:"off:rb_iseq_constant_body.local_iseq"`
	BodyPathObj          int64 `dwarf:"off:rb_iseq_constant_body.location.pathobj"`
	BodyLabel            int64 `dwarf:"off:rb_iseq_constant_body.location.label"`
	BodyBaseLabel        int64 `dwarf:"off:rb_iseq_constant_body.location.base_label"`
	BodyFirstLineno      int64 `dwarf:"off:rb_iseq_constant_body.location.first_lineno"`
	BodyIseqEncoded      int64 `dwarf:"off:rb_iseq_constant_body.iseq_encoded"`
	BodyIseqSize         int64 `dwarf:"off:rb_iseq_constant_body.iseq_size"`
	BodyInsnsInfoBody    int64 `dwarf:"off:rb_iseq_constant_body.insns_info.body"`
	BodyInsnsInfoPos     int64 `dwarf:"off:rb_iseq_constant_body.insns_info.positions"`
	BodyInsnsInfoSize    int64 `dwarf:"off:rb_iseq_constant_body.insns_info.size"`
	BodyInsnsInfoSuccTbl int64 `dwarf:"off:rb_iseq_constant_body.insns_info.succ_index_table"`
	InsnInfoSize         int64 `dwarf:"size:iseq_insn_info_entry"`
	InsnInfoLineNo       int64 `dwarf:"off:iseq_insn_info_entry.line_no"`

	// enum rb_iseq_type (labels are computed from it as Ruby 3.4 does)
	IseqTypeTop    int64 `dwarf:"enum:ISEQ_TYPE_TOP"`
	IseqTypeMethod int64 `dwarf:"enum:ISEQ_TYPE_METHOD"`
	IseqTypeBlock  int64 `dwarf:"enum:ISEQ_TYPE_BLOCK"`
	IseqTypeClass  int64 `dwarf:"enum:ISEQ_TYPE_CLASS"`
	IseqTypeRescue int64 `dwarf:"enum:ISEQ_TYPE_RESCUE"`
	IseqTypeEnsure int64 `dwarf:"enum:ISEQ_TYPE_ENSURE"`
	IseqTypeEval   int64 `dwarf:"enum:ISEQ_TYPE_EVAL"`
	IseqTypeMain   int64 `dwarf:"enum:ISEQ_TYPE_MAIN"`
	IseqTypePlain  int64 `dwarf:"enum:ISEQ_TYPE_PLAIN"`

	// struct succ_index_table (iseq.c): pc position -> insn info index
	SuccImmPart      int64 `dwarf:"off:succ_index_table.imm_part"`
	SuccImmPartWords int64 `dwarf:"count:succ_index_table.imm_part"`
	SuccPart         int64 `dwarf:"off:succ_index_table.succ_part"`
	SuccBlockSize    int64 `dwarf:"size:succ_dict_block"`
	SuccBlockRank    int64 `dwarf:"off:succ_dict_block.rank"`
	SuccBlockSmall   int64 `dwarf:"off:succ_dict_block.small_block_ranks"`
	SuccBlockBits    int64 `dwarf:"off:succ_dict_block.bits"`
	SuccBlockWords   int64 `dwarf:"count:succ_dict_block.bits"`

	// method entries
	MEOwner       int64 `dwarf:"off:rb_callable_method_entry_struct.owner"`
	MEDef         int64 `dwarf:"off:rb_callable_method_entry_struct.def"`
	MECalledID    int64 `dwarf:"off:rb_callable_method_entry_struct.called_id"`
	DefOriginalID int64 `dwarf:"off:rb_method_definition_struct.original_id"`

	// enum imemo_type, and its mask (a macro)
	ImemoMask  int64 `macro:"15"`
	ImemoMent  int64 `dwarf:"enum:imemo_ment"`
	ImemoIseq  int64 `dwarf:"enum:imemo_iseq"`
	ImemoCref  int64 `dwarf:"enum:imemo_cref"`
	ImemoSvar  int64 `dwarf:"enum:imemo_svar"`
	SvarCrefME int64 `dwarf:"off:vm_svar.cref_or_me"`

	// the object graph of a heap dump beyond the core types: typed data
	// (its type's name says which decoder applies), Procs and their
	// environments, method definitions, instruction sequences' literals
	// and call data, method tables, fiber-local storage, generic instance
	// variables (gc.c's gc_mark_children and the types' mark functions)
	RTypedDataType      int64 `dwarf:"off:RTypedData.type,optional" need:"dump"`
	RTypedDataTypedFlag int64 `dwarf:"off:RTypedData.typed_flag,optional" need:"dump"`
	DataTypeName        int64 `dwarf:"off:rb_data_type_struct.wrap_struct_name,optional" need:"dump"`
	ProcSize            int64 `dwarf:"size:rb_proc_t,optional" need:"dump"`
	ProcEP              int64 `dwarf:"off:rb_proc_t.block.as.captured.ep,optional" need:"dump"`
	// captured.self shares its word with as.symbol and as.proc
	ProcSelf int64 `dwarf:"off:rb_proc_t.block.as.captured.self,optional" need:"dump"`
	ProcCode int64 `dwarf:"off:rb_proc_t.block.as.captured.code,optional" need:"dump"`
	// TypedDataEmbedded is TYPED_DATA_EMBEDDED (3.3+), a bit of
	// typed_flag (whose other bit says typed): the data is in the slot.
	TypedDataEmbedded int64 `macro:"2"`
	// EnvGuardMask is what GC_GUARDED_PTR_REF clears of a guarded pointer
	// (the previous ep in an environment's specval).
	EnvGuardMask int64 `macro:"3"`
	// ShapeSingleChild tags a shape's edges word that holds its one child
	// in place of a table (SINGLE_CHILD_TAG, 3.3+).
	ShapeSingleChild int64 `macro:"1"`
	// a Binding: its block, then the path of the code it was made in
	BindingPathObj int64 `dwarf:"off:rb_binding_t.pathobj,optional" need:"dump"`
	// EnvIndexEnv is VM_ENV_DATA_INDEX_ENV: ep[1] holds the env object
	// of an environment that has moved to the heap.
	EnvIndexEnv int64 `macro:"1"`
	ImemoEnv    int64 `dwarf:"enum:imemo_env,optional" need:"dump"`
	// the other imemo types, for the names a dump gives them
	ImemoThrowData  int64 `dwarf:"enum:imemo_throw_data,optional" need:"dump"`
	ImemoIfunc      int64 `dwarf:"enum:imemo_ifunc,optional" need:"dump"`
	ImemoMemo       int64 `dwarf:"enum:imemo_memo,optional" need:"dump"`
	ImemoTmpbuf     int64 `dwarf:"enum:imemo_tmpbuf,optional" need:"dump"`
	ImemoAST        int64 `dwarf:"enum:imemo_ast,optional" need:"dump"`
	ImemoStrterm    int64 `dwarf:"enum:imemo_parser_strterm,optional" need:"dump"`
	ImemoCallinfo   int64 `dwarf:"enum:imemo_callinfo,optional" need:"dump"`
	ImemoCallcache  int64 `dwarf:"enum:imemo_callcache,optional" need:"dump"`
	ImemoConstcache int64 `dwarf:"enum:imemo_constcache,optional" need:"dump"`
	ImemoFields     int64 `dwarf:"enum:imemo_fields,optional" need:"dump"`
	EnvEP           int64 `dwarf:"off:rb_env_t.ep,optional" need:"dump"`
	EnvEnv          int64 `dwarf:"off:rb_env_t.env,optional" need:"dump"`
	EnvEnvSize      int64 `dwarf:"off:rb_env_t.env_size,optional" need:"dump"`
	MethodDefSize   int64 `dwarf:"size:rb_method_definition_struct,optional" need:"dump"`
	BodyCallData    int64 `dwarf:"off:rb_iseq_constant_body.call_data,optional" need:"dump"`
	BodyCISize      int64 `dwarf:"off:rb_iseq_constant_body.ci_size,optional" need:"dump"`
	BodyCatchTable  int64 `dwarf:"off:rb_iseq_constant_body.catch_table,optional" need:"dump"`
	BodyISEntries   int64 `dwarf:"off:rb_iseq_constant_body.is_entries,optional" need:"dump"`
	// how many inline storage entries is_entries holds: is_size (before
	// 3.2), or the sum of the inline caches' counts
	BodyISSize     int64 `dwarf:"off:rb_iseq_constant_body.is_size,optional" need:"dump"`
	BodyICSize     int64 `dwarf:"off:rb_iseq_constant_body.ic_size,optional" need:"dump"`
	BodyISESize    int64 `dwarf:"off:rb_iseq_constant_body.ise_size,optional" need:"dump"`
	BodyIVCSize    int64 `dwarf:"off:rb_iseq_constant_body.ivc_size,optional" need:"dump"`
	BodyICVARCSize int64 `dwarf:"off:rb_iseq_constant_body.icvarc_size,optional" need:"dump"`
	ISEntrySize    int64 `dwarf:"size:iseq_inline_storage_entry,optional" need:"dump"`
	// ISEntryUnmarked is the offset in an inline storage entry of a word
	// Ruby's GC does not mark: 2.7's constant caches keep the constant's
	// value there (-1: none).
	ISEntryUnmarked  int64 `macro:"-1,2.7=16"`
	CallDataSize     int64 `dwarf:"size:rb_call_data,optional" need:"dump"`
	CatchTableSize   int64 `dwarf:"off:iseq_catch_table.size,optional" need:"dump"`
	CatchTableEntry0 int64 `dwarf:"off:iseq_catch_table.entries,optional" need:"dump"`
	CatchEntrySize   int64 `dwarf:"size:iseq_catch_table_entry,optional" need:"dump"`
	// the method table: in struct RClass (3.3+) or its extension
	RClassMTbl   int64 `dwarf:"off:RClass.m_tbl,optional" need:"dump"`
	ClassExtMTbl int64 `dwarf:"off:rb_classext_struct.m_tbl,optional" need:"dump"`
	// the call caches and callable method entries a class keeps (3.0+)
	ClassExtCCTbl        int64 `dwarf:"off:rb_classext_struct.cc_tbl,optional" need:"dump"`
	ClassExtCallableMTbl int64 `dwarf:"off:rb_classext_struct.callable_m_tbl,optional" need:"dump"`
	CCEntriesLen         int64 `dwarf:"off:rb_class_cc_entries.len,optional" need:"dump"`
	CCEntriesCME         int64 `dwarf:"off:rb_class_cc_entries.cme,optional" need:"dump"`
	CCEntriesEntries     int64 `dwarf:"off:rb_class_cc_entries.entries,optional" need:"dump"`
	CCEntrySize          int64 `dwarf:"size:rb_class_cc_entries_entry,optional" need:"dump"`
	// 3.4+: the VM's lists of objects C code pinned (typed data
	// "VM/pin_array_list": a chain of VALUE arrays)
	PinListNext  int64 `dwarf:"off:pin_array_list.next,optional" need:"dump"`
	PinListLen   int64 `dwarf:"off:pin_array_list.len,optional" need:"dump"`
	PinListArray int64 `dwarf:"off:pin_array_list.array,optional" need:"dump"`
	// a class's subclasses: a list of entries (weak references)
	ClassExtSubclasses int64 `dwarf:"off:rb_classext_struct.subclasses,optional" need:"dump"`
	SubclassKlass      int64 `dwarf:"off:rb_subclass_entry.klass,optional" need:"dump"`
	SubclassNext       int64 `dwarf:"off:rb_subclass_entry.next,optional" need:"dump"`
	// the addresses C code registered with rb_gc_register_address: a list
	// in the objspace (before 3.4) or the VM (3.4+) of VALUE pointers
	ObjspaceGlobalList int64 `dwarf:"off:rb_objspace.global_list,optional" need:"dump"`
	VMGlobalObjectList int64 `dwarf:"off:rb_vm_struct.global_object_list,optional" need:"dump"`
	GCListVarptr       int64 `dwarf:"off:gc_list.varptr|global_object_list.varptr,optional" need:"dump"`
	GCListNext         int64 `dwarf:"off:gc_list.next|global_object_list.next,optional" need:"dump"`
	// a Thread's root Fiber: its object
	ThreadRootFiber int64 `dwarf:"off:rb_thread_struct.root_fiber,optional" need:"dump"`
	FiberSelf       int64 `dwarf:"off:rb_fiber_struct.cont.self,optional" need:"dump"`
	// ObjectSpace::WeakMap: one table of pointers to (key, value) pairs
	// (3.3+), or wmap2obj mapping keys to values directly
	WeakMapTable    int64 `dwarf:"off:weakmap.table,optional" need:"dump"`
	WeakMapWmap2Obj int64 `dwarf:"off:weakmap.wmap2obj,optional" need:"dump"`
	RFileFptr       int64 `dwarf:"off:RFile.fptr,optional" need:"dump"`
	// The sizes of the structs the VM allocates whose every word a heap
	// dump reads (an iseq's body, the rb_vm_t, the main ractor, a File's
	// rb_io_t, a Thread's rb_thread_t): sized by the layout, never by the
	// allocator. The iseq body and the rb_vm_t are also the blocks of
	// known size the allocator's metadata is checked against
	// (internal/malloc).
	IseqBodySize int64 `dwarf:"size:rb_iseq_constant_body" need:"dump"`
	// BodyJITEntry is where the body's JIT fields begin (USE_YJIT,
	// USE_RJIT, USE_MJIT: configure decides whether they exist; none
	// holds a VALUE the GC marks): the body's VALUEs lie before it, and a
	// build without a JIT allocates no more.
	BodyJITEntry int64 `dwarf:"off:rb_iseq_constant_body.jit_entry|rb_iseq_constant_body.jit_func,optional" need:"dump"`
	VMSize       int64 `dwarf:"size:rb_vm_struct" need:"dump"`
	ThreadSize   int64 `dwarf:"size:rb_thread_struct" need:"dump"`
	RactorSize   int64 `dwarf:"size:rb_ractor_struct,optional" need:"dump"`
	// the VM's tables of method entries that rb_vm_mark marks (3.0+): the
	// negative entries (an rb_id_table) and the overloaded ones (an
	// st_table)
	VMNegativeCMETable   int64 `dwarf:"off:rb_vm_struct.negative_cme_table,optional" need:"dump"`
	VMOverloadedCMETable int64 `dwarf:"off:rb_vm_struct.overloaded_cme_table,optional" need:"dump"`
	IOSize               int64 `dwarf:"size:rb_io_t|rb_io" need:"dump"`
	ECLocalStorage       int64 `dwarf:"off:rb_execution_context_struct.local_storage,optional" need:"dump"`
	// ECLocalStorageST: the fiber-locals are an st_table (2.7), not an
	// rb_id_table
	ECLocalStorageST int64 `macro:"0,2.7=1"`
	ECStorage        int64 `dwarf:"off:rb_execution_context_struct.storage,optional" need:"dump"`
	ECMachineStart   int64 `dwarf:"off:rb_execution_context_struct.machine.stack_start,optional" need:"dump"`
	GenIVNumIV       int64 `dwarf:"off:gen_ivtbl.numiv|gen_ivtbl.as.shape.numiv,optional" need:"dump"`
	GenIVPtr         int64 `dwarf:"off:gen_ivtbl.ivptr|gen_ivtbl.as.shape.ivptr,optional" need:"dump"`
	SymbolsDsymHash  int64 `dwarf:"off:rb_symbols_t.dsymbol_fstr_hash,optional" need:"dump"`

	// Locks and waits (thread_sync.c, cont.c). A thread waiting for a
	// Mutex names it in locking_mutex (a VALUE); the Mutexes it holds are
	// a list through keeping_mutexes (rb_mutex_t pointers, linked by
	// next_mutex). A Mutex's owner is a fiber (3.0+), whose saved
	// execution context names its thread, or a thread (2.7). A Queue
	// keeps its items in an Array (que) and counts its poppers waiting;
	// a SizedQueue holds a Queue and counts its pushers waiting (a build
	// without them names a queue wait without the queue's state). A build
	// has one of the owner's two forms (MutexFiber or MutexThread).
	ThreadLockingMutex   int64 `dwarf:"off:rb_thread_struct.locking_mutex" need:"locks"`
	ThreadKeepingMutexes int64 `dwarf:"off:rb_thread_struct.keeping_mutexes" need:"locks"`
	MutexFiber           int64 `dwarf:"off:rb_mutex_struct.fiber,optional" need:"locks"`
	MutexThread          int64 `dwarf:"off:rb_mutex_struct.th,optional" need:"locks"`
	// MutexECSerial is, where the Mutex keeps its owner's execution
	// context's serial beside its thread (4.0), what says it is held (not
	// 0): its thread is left behind when it is let go.
	MutexECSerial            int64 `dwarf:"off:rb_mutex_struct.ec_serial,optional" need:"locks"`
	MutexNext                int64 `dwarf:"off:rb_mutex_struct.next_mutex" need:"locks"`
	FiberThreadPtr           int64 `dwarf:"off:rb_fiber_struct.cont.saved_ec.thread_ptr,optional" need:"locks"`
	QueueQue                 int64 `dwarf:"off:rb_queue.que,optional" need:"locks"`
	QueueNumWaiting          int64 `dwarf:"off:rb_queue.num_waiting,optional" need:"locks"`
	SizedQueueQueue          int64 `dwarf:"off:rb_szqueue.q,optional" need:"locks"`
	SizedQueueNumWaitingPush int64 `dwarf:"off:rb_szqueue.num_waiting_push,optional" need:"locks"`
	SizedQueueMax            int64 `dwarf:"off:rb_szqueue.max,optional" need:"locks"`

	// objects; a Thread object is typed data whose data is its rb_thread_t
	RTypedDataData int64 `dwarf:"off:RTypedData.data"`
	RBasicFlags    int64 `dwarf:"off:RBasic.flags"`
	RBasicKlass    int64 `dwarf:"off:RBasic.klass"`
	// BaseSlotSize is sizeof(RVALUE) (BASE_SLOT_SIZE since 3.2; 4.0 has
	// no RVALUE): the smallest heap slot, and every slot before 3.2.
	BaseSlotSize int64 `macro:"40"`

	// the GC heap (gc.c): objspace->heap_pages.sorted lists every page, of
	// every size pool, allocated_pages of them; a page holds total_slots
	// slots of slot_size bytes (both shorts) from start
	ObjspaceSortedPages int64 `dwarf:"off:rb_objspace.heap_pages.sorted" need:"census"`
	// the finalizers ObjectSpace.define_finalizer registered: object ->
	// an Array of them (the "finalizers" root)
	ObjspaceFinalizerTable int64 `dwarf:"off:rb_objspace.finalizer_table,optional" need:"dump"`
	ObjspaceAllocatedPages int64 `dwarf:"off:rb_objspace.heap_pages.allocated_pages" need:"census"`
	// Since 3.4 heap_pages.sorted points at a darray (a length, a capacity,
	// then the page pointers) instead of a plain array; -1 before.
	SortedDarrayData int64 `dwarf:"off:rb_objspace.heap_pages.sorted->data,optional" need:"census"`
	SortedDarrayLen  int64 `dwarf:"off:rb_objspace.heap_pages.sorted->meta.size,optional" need:"census"`
	// Whether the GC is at work (objspace->flags.during_gc, set from
	// gc_enter to gc_exit) and in which phase (flags.mode, enum gc_mode):
	// the sampler's (garbage collection), (marking) and (sweeping) frames.
	ObjspaceDuringGCBit int64 `dwarf:"bitoff:rb_objspace.flags.during_gc" need:"census"`
	ObjspaceModeBit     int64 `dwarf:"bitoff:rb_objspace.flags.mode" need:"census"`
	ObjspaceModeBits    int64 `dwarf:"bits:rb_objspace.flags.mode" need:"census"`
	GCModeMarking       int64 `dwarf:"enum:gc_mode_marking" need:"census"`
	GCModeSweeping      int64 `dwarf:"enum:gc_mode_sweeping" need:"census"`
	// The collector's counts (objspace->profile): every collection, and
	// the major ones. What a reader learned of objects (an iseq, a method
	// entry, a class) holds while they stand: an old object is freed or
	// moved only by a major collection, a young one by any.
	ObjspaceGCCount      int64 `dwarf:"off:rb_objspace.profile.count,optional" need:"census"`
	ObjspaceMajorGCCount int64 `dwarf:"off:rb_objspace.profile.major_gc_count,optional" need:"census"`
	HeapPageSlotSize     int64 `dwarf:"off:heap_page.slot_size,optional" need:"census"`
	HeapPageTotalSlots   int64 `dwarf:"off:heap_page.total_slots" need:"census"`
	HeapPageStart        int64 `dwarf:"off:heap_page.start" need:"census"`

	RStringLen           int64 `dwarf:"off:RString.len,optional"`
	RStringHeapLen       int64 `dwarf:"off:RString.as.heap.len,optional"`
	RStringHeapPtr       int64 `dwarf:"off:RString.as.heap.ptr"`
	RStringEmbedAry      int64 `dwarf:"off:RString.as.embed.ary|RString.as.ary"`
	RStringHeapCapa      int64 `dwarf:"off:RString.as.heap.aux.capa" need:"census"`
	RStringEmbedLen      int64 `dwarf:"off:RString.as.embed.len,optional"`
	RStringNoEmbed       int64 `dwarf:"enum:RSTRING_NOEMBED"`
	RStringEmbedLenMask  int64 `dwarf:"enum:RSTRING_EMBED_LEN_MASK,optional"`
	RStringEmbedLenShift int64 `dwarf:"enum:RSTRING_EMBED_LEN_SHIFT,optional"`

	RArrayHeapLen       int64 `dwarf:"off:RArray.as.heap.len"`
	RArrayHeapPtr       int64 `dwarf:"off:RArray.as.heap.ptr"`
	RArrayHeapCapa      int64 `dwarf:"off:RArray.as.heap.aux.capa" need:"census"`
	RArrayEmbedAry      int64 `dwarf:"off:RArray.as.ary"`
	RArrayEmbedFlag     int64 `dwarf:"enum:RARRAY_EMBED_FLAG"`
	RArrayEmbedLenMask  int64 `dwarf:"enum:RARRAY_EMBED_LEN_MASK"`
	RArrayEmbedLenShift int64 `dwarf:"enum:RARRAY_EMBED_LEN_SHIFT"`

	// more of the objects, for heap dump's references (gc_mark_children)
	RStringShared    int64 `dwarf:"off:RString.as.heap.aux.shared" need:"dump"`
	RStringFstr      int64 `dwarf:"enum:RSTRING_FSTR" need:"dump"`
	EncodingShift    int64 `dwarf:"enum:RUBY_ENCODING_SHIFT" need:"dump"`
	EncodingMask     int64 `dwarf:"enum:RUBY_ENCODING_MASK" need:"dump"`
	CoderangeMask    int64 `dwarf:"enum:RUBY_ENC_CODERANGE_MASK" need:"dump"`
	Coderange7Bit    int64 `dwarf:"enum:RUBY_ENC_CODERANGE_7BIT" need:"dump"`
	RArraySharedRoot int64 `dwarf:"off:RArray.as.heap.aux.shared_root" need:"dump"`
	RFloatValue      int64 `dwarf:"off:RFloat.float_value" need:"dump"`

	// An object's ivars are in its slot when ROBJECT_EMBED is set (to
	// 3.4), or when ROBJECT_HEAP is clear (4.0): a build has one of them.
	RObjectEmbedFlag   int64 `dwarf:"enum:ROBJECT_EMBED,optional" need:"dump"`
	RObjectHeapFlag    int64 `dwarf:"enum:ROBJECT_HEAP,optional" need:"dump"`
	RObjectEmbedAry    int64 `dwarf:"off:RObject.as.ary" need:"dump"`
	RObjectEmbedLenMax int64 `dwarf:"count:RObject.as.ary" need:"dump"`
	RObjectHeapNumIV   int64 `dwarf:"off:RObject.as.heap.numiv,optional" need:"dump"`
	RObjectHeapIVPtr   int64 `dwarf:"off:RObject.as.heap.ivptr|RObject.as.heap.fields" need:"dump"`

	// object shapes (3.2+): the shape ID is in the top bits of RBasic.flags
	// and indexes rb_shape_tree_ptr->shape_list
	ShapeSize        int64 `dwarf:"size:rb_shape,optional" need:"dump"`
	ShapeNextIVIndex int64 `dwarf:"off:rb_shape.next_iv_index|rb_shape.next_field_index,optional" need:"dump"`
	ShapeCapacity    int64 `dwarf:"off:rb_shape.capacity,optional" need:"dump"`
	ShapeType        int64 `dwarf:"off:rb_shape.type,optional" need:"dump"`
	ShapeTreeList    int64 `dwarf:"off:rb_shape_tree_t.shape_list,optional" need:"dump"`
	ShapeTooComplex  int64 `dwarf:"enum:SHAPE_OBJ_TOO_COMPLEX,optional" need:"dump"`
	ShapeFlagShift   int64 `macro:"32"`
	// what dump_all's SHAPE lines say of each shape (3.3+)
	ShapeParentID   int64 `dwarf:"off:rb_shape.parent_id,optional" need:"dump"`
	ShapeEdgeName   int64 `dwarf:"off:rb_shape.edge_name,optional" need:"dump"`
	ShapeEdges      int64 `dwarf:"off:rb_shape.edges,optional" need:"dump"`
	ShapeTreeNextID int64 `dwarf:"off:rb_shape_tree_t.next_shape_id,optional" need:"dump"`
	ShapeRoot       int64 `dwarf:"enum:SHAPE_ROOT,optional" need:"dump"`
	ShapeIvar       int64 `dwarf:"enum:SHAPE_IVAR,optional" need:"dump"`
	ShapeFrozen     int64 `dwarf:"enum:SHAPE_FROZEN,optional" need:"dump"`
	ShapeTObject    int64 `dwarf:"enum:SHAPE_T_OBJECT,optional" need:"dump"`
	ShapeObjID      int64 `dwarf:"enum:SHAPE_OBJ_ID,optional" need:"dump"`
	// AttrIndexSize is the width of a shape's next_field_index and
	// capacity (attr_index_t: 4 bytes to 3.4 on 64-bit, 2 on 4.0).
	AttrIndexSize int64 `dwarf:"size:attr_index_t,optional" need:"dump"`
	// 4.0 keeps flags in the shape ID's high bits (frozen, has an object
	// ID, too complex) beside a heap index: the shape list's index is
	// what the two masks leave.
	ShapeIDFlagsMask     int64 `dwarf:"enum:SHAPE_ID_FLAGS_MASK,optional" need:"dump"`
	ShapeIDHeapIndexMask int64 `dwarf:"enum:SHAPE_ID_HEAP_INDEX_MASK,optional" need:"dump"`
	ShapeIDFlTooComplex  int64 `dwarf:"enum:SHAPE_ID_FL_TOO_COMPLEX,optional" need:"dump"`
	// DumpShapes: dump_all writes SHAPE lines (3.3+)
	DumpShapes  int64 `macro:"1,2.7=0,3.0=0,3.1=0,3.2=0"`
	IDTableNum  int64 `dwarf:"off:rb_id_table.num" need:"dump"`
	IDTableSize int64 `dwarf:"size:rb_id_table" need:"dump"`

	// hashes: an ar_table (up to 8 pairs) behind a pointer (3.1) or in the
	// slot right after struct RHash (3.3), or an st_table
	RHashSize         int64 `dwarf:"size:RHash" need:"dump"`
	RHashAR           int64 `dwarf:"off:RHash.as.ar,optional" need:"dump"`
	RHashST           int64 `dwarf:"off:RHash.as.st,optional" need:"dump"`
	RHashIfnone       int64 `dwarf:"off:RHash.ifnone" need:"dump"`
	RHashSTFlag       int64 `dwarf:"enum:RHASH_ST_TABLE_FLAG" need:"dump"`
	RHashProcDefault  int64 `dwarf:"enum:RHASH_PROC_DEFAULT" need:"dump"`
	RHashARSizeMask   int64 `dwarf:"enum:RHASH_AR_TABLE_SIZE_MASK" need:"dump"`
	RHashARSizeShift  int64 `dwarf:"enum:RHASH_AR_TABLE_SIZE_SHIFT" need:"dump"`
	RHashARBoundMask  int64 `dwarf:"enum:RHASH_AR_TABLE_BOUND_MASK" need:"dump"`
	RHashARBoundShift int64 `dwarf:"enum:RHASH_AR_TABLE_BOUND_SHIFT" need:"dump"`
	ARTablePairs      int64 `dwarf:"off:ar_table_struct.pairs" need:"dump"`
	ARTableMax        int64 `dwarf:"count:ar_table_struct.pairs" need:"dump"`
	StNumEntries      int64 `dwarf:"off:st_table.num_entries" need:"dump"`

	RStructEmbedLenMask  int64 `dwarf:"enum:RSTRUCT_EMBED_LEN_MASK" need:"dump"`
	RStructEmbedLenShift int64 `dwarf:"enum:RSTRUCT_EMBED_LEN_SHIFT" need:"dump"`
	RStructHeapLen       int64 `dwarf:"off:RStruct.as.heap.len" need:"dump"`
	RStructHeapPtr       int64 `dwarf:"off:RStruct.as.heap.ptr" need:"dump"`
	RStructEmbedAry      int64 `dwarf:"off:RStruct.as.ary" need:"dump"`

	RRationalNum int64 `dwarf:"off:RRational.num" need:"dump"`
	RRationalDen int64 `dwarf:"off:RRational.den" need:"dump"`
	RComplexReal int64 `dwarf:"off:RComplex.real" need:"dump"`
	RComplexImag int64 `dwarf:"off:RComplex.imag" need:"dump"`
	RRegexpSrc   int64 `dwarf:"off:RRegexp.src" need:"dump"`
	RMatchRegexp int64 `dwarf:"off:RMatch.regexp" need:"dump"`
	RMatchStr    int64 `dwarf:"off:RMatch.str" need:"dump"`
	RSymbolFstr  int64 `dwarf:"off:RSymbol.fstr" need:"dump"`

	// class ivars (3.3: an array counted by the class's shape), constants
	ClassExtIVPtr    int64 `dwarf:"off:rb_classext_struct.iv_ptr,optional" need:"dump"`
	ClassExtConstTbl int64 `dwarf:"off:rb_classext_struct.const_tbl" need:"dump"`
	IDTableCapa      int64 `dwarf:"off:rb_id_table.capa" need:"dump"`
	IDTableItems     int64 `dwarf:"off:rb_id_table.items" need:"dump"`
	IDItemSize       int64 `dwarf:"size:rb_id_item" need:"dump"`
	IDItemKey        int64 `dwarf:"off:rb_id_item.key" need:"dump"`
	IDItemVal        int64 `dwarf:"off:rb_id_item.val" need:"dump"`
	ConstEntryValue  int64 `dwarf:"off:rb_const_entry_struct.value" need:"dump"`
	ConstEntryFile   int64 `dwarf:"off:rb_const_entry_struct.file" need:"dump"`

	// global variables (variable.c): rb_global_tbl maps IDs to entries
	GlobalEntryVar int64 `dwarf:"off:rb_global_entry.var" need:"dump"`
	GlobalEntryID  int64 `dwarf:"off:rb_global_entry.id" need:"dump"`
	GlobalVarData  int64 `dwarf:"off:rb_global_variable.data" need:"dump"`

	// classes: the class extension is behind a pointer (3.1) or right
	// after struct RClass (3.3)
	RClassExtPtr      int64 `dwarf:"off:RClass.ptr,optional"`
	RClassSize        int64 `dwarf:"size:RClass"`
	RClassSuper       int64 `dwarf:"off:RClass.super|RClass_and_rb_classext_t.classext.super"`
	ClassExtIVTbl     int64 `dwarf:"off:rb_classext_struct.iv_tbl,optional"`
	ClassExtClassPath int64 `dwarf:"off:rb_classext_struct.classpath,optional"`
	ClassExtAttached  int64 `dwarf:"off:rb_classext_struct.as.singleton_class.attached_object,optional"`
	ClassExtIncluder  int64 `dwarf:"off:rb_classext_struct.includer|rb_classext_struct.as.iclass.includer,optional" need:"dump"`
	// ClassExtOrigin is RCLASS_ORIGIN: the class itself (class_alloc sets
	// it so), or the iclass the methods of a class with prepended modules
	// moved to. The layout check's "a class's classext points back at it".
	ClassExtOrigin int64 `dwarf:"off:rb_classext_struct.origin_,optional"`
	// Before shapes (2.7, 3.1) an object's instance variables are named
	// by its class's iv_index_tbl, an st_table from ID to the index of
	// the ivar's slot (2.7) or to an rb_iv_index_tbl_entry holding it
	// (3.1; IVIndexEntryIndex is -1 where the record is the index).
	ClassExtIVIndexTbl int64 `dwarf:"off:rb_classext_struct.iv_index_tbl,optional" need:"dump"`
	IVIndexEntryIndex  int64 `dwarf:"off:rb_iv_index_tbl_entry.index,optional" need:"dump"`

	// st_table (st.c)
	StEntriesStart int64 `dwarf:"off:st_table.entries_start"`
	StEntriesBound int64 `dwarf:"off:st_table.entries_bound"`
	StEntries      int64 `dwarf:"off:st_table.entries"`
	StEntrySize    int64 `dwarf:"size:st_table_entry"`
	StEntryHash    int64 `dwarf:"off:st_table_entry.hash"`
	StEntryKey     int64 `dwarf:"off:st_table_entry.key"`
	StEntryRecord  int64 `dwarf:"off:st_table_entry.record"`

	// the global symbol table (symbol.c)
	SymbolsLastID int64 `dwarf:"off:rb_symbols_t.last_id|rb_symbols_t.next_id"`
	SymbolsIDs    int64 `dwarf:"off:rb_symbols_t.ids"`
	IDEntryUnit   int64 `macro:"512"`
	IDEntrySize   int64 `dwarf:"enum:ID_ENTRY_SIZE"`
	IDEntryStr    int64 `dwarf:"enum:ID_ENTRY_STR"`
	IDScopeShift  int64 `dwarf:"enum:RUBY_ID_SCOPE_SHIFT"`
	LastOpID      int64 `dwarf:"enum:tLAST_OP_ID"`

	// enum ruby_value_type, ruby_fl_type, ruby_special_consts
	TMask       int64 `dwarf:"enum:RUBY_T_MASK"`
	TNone       int64 `dwarf:"enum:RUBY_T_NONE"`
	TObject     int64 `dwarf:"enum:RUBY_T_OBJECT"`
	TClass      int64 `dwarf:"enum:RUBY_T_CLASS"`
	TModule     int64 `dwarf:"enum:RUBY_T_MODULE"`
	TFloat      int64 `dwarf:"enum:RUBY_T_FLOAT"`
	TString     int64 `dwarf:"enum:RUBY_T_STRING"`
	TRegexp     int64 `dwarf:"enum:RUBY_T_REGEXP"`
	TArray      int64 `dwarf:"enum:RUBY_T_ARRAY"`
	THash       int64 `dwarf:"enum:RUBY_T_HASH"`
	TStruct     int64 `dwarf:"enum:RUBY_T_STRUCT"`
	TBignum     int64 `dwarf:"enum:RUBY_T_BIGNUM"`
	TFile       int64 `dwarf:"enum:RUBY_T_FILE"`
	TData       int64 `dwarf:"enum:RUBY_T_DATA"`
	TMatch      int64 `dwarf:"enum:RUBY_T_MATCH"`
	TComplex    int64 `dwarf:"enum:RUBY_T_COMPLEX"`
	TRational   int64 `dwarf:"enum:RUBY_T_RATIONAL"`
	TNil        int64 `dwarf:"enum:RUBY_T_NIL"`
	TTrue       int64 `dwarf:"enum:RUBY_T_TRUE"`
	TFalse      int64 `dwarf:"enum:RUBY_T_FALSE"`
	TSymbol     int64 `dwarf:"enum:RUBY_T_SYMBOL"`
	TFixnum     int64 `dwarf:"enum:RUBY_T_FIXNUM"`
	TUndef      int64 `dwarf:"enum:RUBY_T_UNDEF"`
	TImemo      int64 `dwarf:"enum:RUBY_T_IMEMO"`
	TNode       int64 `dwarf:"enum:RUBY_T_NODE"`
	TIClass     int64 `dwarf:"enum:RUBY_T_ICLASS"`
	TZombie     int64 `dwarf:"enum:RUBY_T_ZOMBIE"`
	TMoved      int64 `dwarf:"enum:RUBY_T_MOVED"`
	FlUShift    int64 `dwarf:"enum:RUBY_FL_USHIFT"`
	FlSingleton int64 `dwarf:"enum:RUBY_FL_SINGLETON"`
	// The flag bits all set on an old object (the age bits before 3.3,
	// a bit of its own since).
	FlPromoted   int64 `dwarf:"enum:RUBY_FL_PROMOTED,optional"`
	FlFreeze     int64 `dwarf:"enum:RUBY_FL_FREEZE" need:"dump"`
	FlEltsShared int64 `dwarf:"enum:RUBY_ELTS_SHARED"`
	// RArraySharedRootUser is n of RARRAY_SHARED_ROOT_FLAG = FL_USERn
	// (array.c): an Array other Arrays share, whose aux word counts them.
	RArraySharedRootUser int64 `macro:"12,3.1=5,2.7=5"`
	// Behaviours of the VM no struct shows, per family (1: yes, 0: no):
	// dump_all writes no value for an empty String (3.2+), the VM runs an
	// unnamed timer thread that carries the process name (3.2+).
	DumpOmitsEmptyValue int64 `macro:"1,2.7=0,3.0=0,3.1=0"`
	TimerThreadNamed    int64 `macro:"1,2.7=0,3.0=0,3.1=0"`
	// JobsOnStaleEC: rb_postponed_job_register_one flags the execution
	// context of whichever thread last held the GVL (a global before 3.0),
	// which may be a thread that has ended: a job queued from outside may
	// never run, or its flag land in freed memory.
	JobsOnStaleEC int64 `macro:"0,2.7=1"`
	// DumpFloatAltForm: dump_all prints a Float's value with "%#g" (3.0+)
	// rather than "%g" (2.7).
	DumpFloatAltForm int64 `macro:"1,2.7=0"`
	Qnil             int64 `dwarf:"enum:RUBY_Qnil"`
	Qfalse           int64 `dwarf:"enum:RUBY_Qfalse"`
	Qundef           int64 `dwarf:"enum:RUBY_Qundef"`
	FixnumFlag       int64 `dwarf:"enum:RUBY_FIXNUM_FLAG"`
	ImmediateMask    int64 `dwarf:"enum:RUBY_IMMEDIATE_MASK"`
	SpecialShift     int64 `dwarf:"enum:RUBY_SPECIAL_SHIFT"`
	// the other immediates, for the values of instance variables a heap
	// dump writes by name
	Qtrue      int64 `dwarf:"enum:RUBY_Qtrue" need:"dump"`
	SymbolFlag int64 `dwarf:"enum:RUBY_SYMBOL_FLAG" need:"dump"`
	FlonumMask int64 `dwarf:"enum:RUBY_FLONUM_MASK" need:"dump"`
	FlonumFlag int64 `dwarf:"enum:RUBY_FLONUM_FLAG" need:"dump"`
}
