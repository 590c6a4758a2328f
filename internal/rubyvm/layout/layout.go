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
//	off     byte offset of a member path (struct.member.member)
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
package layout

// Layout holds the offsets and constants of one Ruby build configuration.
type Layout struct {
	// Family is the Ruby version family ("3.1") the layout is for; Source
	// says where it came from ("dwarf:/path" or "table").
	Family string
	Source string

	// rb_vm_t
	VMRactorSet        int64 `dwarf:"off:rb_vm_struct.ractor.set"`
	VMRactorMainRactor int64 `dwarf:"off:rb_vm_struct.ractor.main_ractor"`
	VMRactorMainThread int64 `dwarf:"off:rb_vm_struct.ractor.main_thread"`
	VMObjspace         int64 `dwarf:"off:rb_vm_struct.objspace"`

	// rb_ractor_t
	RactorVMListNode  int64 `dwarf:"off:rb_ractor_struct.vmlr_node"`
	RactorThreadsSet  int64 `dwarf:"off:rb_ractor_struct.threads.set"`
	RactorThreadsCnt  int64 `dwarf:"off:rb_ractor_struct.threads.cnt"`
	RactorRunningEC   int64 `dwarf:"off:rb_ractor_struct.threads.running_ec"`
	RactorGVLOwner    int64 `dwarf:"off:rb_ractor_struct.threads.gvl.owner|rb_ractor_struct.threads.sched.running"`
	RactorThreadsMain int64 `dwarf:"off:rb_ractor_struct.threads.main"`

	// ccan list nodes (struct list_node / ccan_list_node)
	ListNodeNext int64 `dwarf:"off:list_node.next|ccan_list_node.next"`

	// rb_thread_t
	ThreadListNode  int64 `dwarf:"off:rb_thread_struct.lt_node"`
	ThreadSelf      int64 `dwarf:"off:rb_thread_struct.self"`
	ThreadEC        int64 `dwarf:"off:rb_thread_struct.ec"`
	ThreadPthread   int64 `dwarf:"off:rb_thread_struct.thread_id|rb_thread_struct.nt,optional"`
	ThreadTID       int64 `dwarf:"off:rb_thread_struct.tid,optional"`
	ThreadNT        int64 `dwarf:"off:rb_thread_struct.nt,optional"`
	NativeThreadTID int64 `dwarf:"off:rb_native_thread.tid,optional"`
	ThreadStatusBit int64 `dwarf:"bitoff:rb_thread_struct.status"`
	ThreadStatusLen int64 `dwarf:"bits:rb_thread_struct.status"`
	ThreadName      int64 `dwarf:"off:rb_thread_struct.name"`

	// enum rb_thread_status
	ThreadRunnable       int64 `dwarf:"enum:THREAD_RUNNABLE"`
	ThreadStopped        int64 `dwarf:"enum:THREAD_STOPPED"`
	ThreadStoppedForever int64 `dwarf:"enum:THREAD_STOPPED_FOREVER"`
	ThreadKilled         int64 `dwarf:"enum:THREAD_KILLED"`

	// rb_execution_context_t
	ECVMStack     int64 `dwarf:"off:rb_execution_context_struct.vm_stack"`
	ECVMStackSize int64 `dwarf:"off:rb_execution_context_struct.vm_stack_size"`
	ECCFP         int64 `dwarf:"off:rb_execution_context_struct.cfp"`

	// rb_control_frame_t
	CFPSize int64 `dwarf:"size:rb_control_frame_struct"`
	CFPPC   int64 `dwarf:"off:rb_control_frame_struct.pc"`
	CFPSP   int64 `dwarf:"off:rb_control_frame_struct.sp"`
	CFPIseq int64 `dwarf:"off:rb_control_frame_struct.iseq"`
	CFPSelf int64 `dwarf:"off:rb_control_frame_struct.self"`
	CFPEP   int64 `dwarf:"off:rb_control_frame_struct.ep"`

	// environment data below ep (vm_core.h macros)
	EnvIndexMECref int64 `macro:"-2"`
	EnvIndexFlags  int64 `macro:"0"`

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

	// rb_iseq_t and its constant body
	IseqBody             int64 `dwarf:"off:rb_iseq_struct.body"`
	BodyType             int64 `dwarf:"off:rb_iseq_constant_body.type"`
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

	// enum rb_iseq_type (only what labels need)
	IseqTypeTop  int64 `dwarf:"enum:ISEQ_TYPE_TOP"`
	IseqTypeMain int64 `dwarf:"enum:ISEQ_TYPE_MAIN"`

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

	// objects
	RBasicFlags int64 `dwarf:"off:RBasic.flags"`
	RBasicKlass int64 `dwarf:"off:RBasic.klass"`
	RValueSize  int64 `dwarf:"size:RVALUE"`

	// the GC heap (gc.c): objspace->heap_pages.sorted lists every page, of
	// every size pool, allocated_pages of them; a page holds total_slots
	// slots of slot_size bytes (both shorts) from start
	ObjspaceSortedPages    int64 `dwarf:"off:rb_objspace.heap_pages.sorted"`
	ObjspaceAllocatedPages int64 `dwarf:"off:rb_objspace.heap_pages.allocated_pages"`
	HeapPageSlotSize       int64 `dwarf:"off:heap_page.slot_size"`
	HeapPageTotalSlots     int64 `dwarf:"off:heap_page.total_slots"`
	HeapPageStart          int64 `dwarf:"off:heap_page.start"`

	RStringLen           int64 `dwarf:"off:RString.len,optional"`
	RStringHeapLen       int64 `dwarf:"off:RString.as.heap.len,optional"`
	RStringHeapPtr       int64 `dwarf:"off:RString.as.heap.ptr"`
	RStringEmbedAry      int64 `dwarf:"off:RString.as.embed.ary"`
	RStringHeapCapa      int64 `dwarf:"off:RString.as.heap.aux.capa"`
	RStringEmbedLen      int64 `dwarf:"off:RString.as.embed.len,optional"`
	RStringNoEmbed       int64 `dwarf:"enum:RSTRING_NOEMBED"`
	RStringEmbedLenMask  int64 `dwarf:"enum:RSTRING_EMBED_LEN_MASK,optional"`
	RStringEmbedLenShift int64 `dwarf:"enum:RSTRING_EMBED_LEN_SHIFT,optional"`

	RArrayHeapLen       int64 `dwarf:"off:RArray.as.heap.len"`
	RArrayHeapPtr       int64 `dwarf:"off:RArray.as.heap.ptr"`
	RArrayHeapCapa      int64 `dwarf:"off:RArray.as.heap.aux.capa"`
	RArrayEmbedAry      int64 `dwarf:"off:RArray.as.ary"`
	RArrayEmbedFlag     int64 `dwarf:"enum:RARRAY_EMBED_FLAG"`
	RArrayEmbedLenMask  int64 `dwarf:"enum:RARRAY_EMBED_LEN_MASK"`
	RArrayEmbedLenShift int64 `dwarf:"enum:RARRAY_EMBED_LEN_SHIFT"`

	// more of the objects, for heap dump's references (gc_mark_children)
	RStringShared    int64 `dwarf:"off:RString.as.heap.aux.shared"`
	RStringFstr      int64 `dwarf:"enum:RSTRING_FSTR"`
	EncodingShift    int64 `dwarf:"enum:RUBY_ENCODING_SHIFT"`
	EncodingMask     int64 `dwarf:"enum:RUBY_ENCODING_MASK"`
	CoderangeMask    int64 `dwarf:"enum:RUBY_ENC_CODERANGE_MASK"`
	Coderange7Bit    int64 `dwarf:"enum:RUBY_ENC_CODERANGE_7BIT"`
	RArraySharedRoot int64 `dwarf:"off:RArray.as.heap.aux.shared_root"`
	RFloatValue      int64 `dwarf:"off:RFloat.float_value"`

	RObjectEmbedFlag   int64 `dwarf:"enum:ROBJECT_EMBED"`
	RObjectEmbedAry    int64 `dwarf:"off:RObject.as.ary"`
	RObjectEmbedLenMax int64 `dwarf:"count:RObject.as.ary"`
	RObjectHeapNumIV   int64 `dwarf:"off:RObject.as.heap.numiv,optional"`
	RObjectHeapIVPtr   int64 `dwarf:"off:RObject.as.heap.ivptr"`

	// object shapes (3.2+): the shape ID is in the top bits of RBasic.flags
	// and indexes rb_shape_tree_ptr->shape_list
	ShapeSize        int64 `dwarf:"size:rb_shape,optional"`
	ShapeNextIVIndex int64 `dwarf:"off:rb_shape.next_iv_index,optional"`
	ShapeCapacity    int64 `dwarf:"off:rb_shape.capacity,optional"`
	ShapeType        int64 `dwarf:"off:rb_shape.type,optional"`
	ShapeTreeList    int64 `dwarf:"off:rb_shape_tree_t.shape_list,optional"`
	ShapeTooComplex  int64 `dwarf:"enum:SHAPE_OBJ_TOO_COMPLEX,optional"`
	ShapeFlagShift   int64 `macro:"32"`

	// hashes: an ar_table (up to 8 pairs) behind a pointer (3.1) or in the
	// slot right after struct RHash (3.3), or an st_table
	RHashSize         int64 `dwarf:"size:RHash"`
	RHashAR           int64 `dwarf:"off:RHash.as.ar,optional"`
	RHashST           int64 `dwarf:"off:RHash.as.st,optional"`
	RHashIfnone       int64 `dwarf:"off:RHash.ifnone"`
	RHashSTFlag       int64 `dwarf:"enum:RHASH_ST_TABLE_FLAG"`
	RHashProcDefault  int64 `dwarf:"enum:RHASH_PROC_DEFAULT"`
	RHashARSizeMask   int64 `dwarf:"enum:RHASH_AR_TABLE_SIZE_MASK"`
	RHashARSizeShift  int64 `dwarf:"enum:RHASH_AR_TABLE_SIZE_SHIFT"`
	RHashARBoundMask  int64 `dwarf:"enum:RHASH_AR_TABLE_BOUND_MASK"`
	RHashARBoundShift int64 `dwarf:"enum:RHASH_AR_TABLE_BOUND_SHIFT"`
	ARTablePairs      int64 `dwarf:"off:ar_table_struct.pairs"`
	ARTableMax        int64 `dwarf:"count:ar_table_struct.pairs"`
	StNumEntries      int64 `dwarf:"off:st_table.num_entries"`

	RStructEmbedLenMask  int64 `dwarf:"enum:RSTRUCT_EMBED_LEN_MASK"`
	RStructEmbedLenShift int64 `dwarf:"enum:RSTRUCT_EMBED_LEN_SHIFT"`
	RStructHeapLen       int64 `dwarf:"off:RStruct.as.heap.len"`
	RStructHeapPtr       int64 `dwarf:"off:RStruct.as.heap.ptr"`
	RStructEmbedAry      int64 `dwarf:"off:RStruct.as.ary"`

	RRationalNum int64 `dwarf:"off:RRational.num"`
	RRationalDen int64 `dwarf:"off:RRational.den"`
	RComplexReal int64 `dwarf:"off:RComplex.real"`
	RComplexImag int64 `dwarf:"off:RComplex.imag"`
	RRegexpSrc   int64 `dwarf:"off:RRegexp.src"`
	RMatchRegexp int64 `dwarf:"off:RMatch.regexp"`
	RMatchStr    int64 `dwarf:"off:RMatch.str"`
	RSymbolFstr  int64 `dwarf:"off:RSymbol.fstr"`

	// class ivars (3.3: an array counted by the class's shape), constants
	ClassExtIVPtr    int64 `dwarf:"off:rb_classext_struct.iv_ptr,optional"`
	ClassExtConstTbl int64 `dwarf:"off:rb_classext_struct.const_tbl"`
	IDTableCapa      int64 `dwarf:"off:rb_id_table.capa"`
	IDTableItems     int64 `dwarf:"off:rb_id_table.items"`
	IDItemSize       int64 `dwarf:"size:rb_id_item"`
	IDItemKey        int64 `dwarf:"off:rb_id_item.key"`
	IDItemVal        int64 `dwarf:"off:rb_id_item.val"`
	ConstEntryValue  int64 `dwarf:"off:rb_const_entry_struct.value"`
	ConstEntryFile   int64 `dwarf:"off:rb_const_entry_struct.file"`

	// global variables (variable.c): rb_global_tbl maps IDs to entries
	GlobalEntryVar int64 `dwarf:"off:rb_global_entry.var"`
	GlobalEntryID  int64 `dwarf:"off:rb_global_entry.id"`
	GlobalVarData  int64 `dwarf:"off:rb_global_variable.data"`

	// classes: the class extension is behind a pointer (3.1) or right
	// after struct RClass (3.3)
	RClassExtPtr      int64 `dwarf:"off:RClass.ptr,optional"`
	RClassSize        int64 `dwarf:"size:RClass"`
	RClassSuper       int64 `dwarf:"off:RClass.super"`
	ClassExtIVTbl     int64 `dwarf:"off:rb_classext_struct.iv_tbl,optional"`
	ClassExtClassPath int64 `dwarf:"off:rb_classext_struct.classpath,optional"`
	ClassExtAttached  int64 `dwarf:"off:rb_classext_struct.as.singleton_class.attached_object,optional"`
	ClassExtIncluder  int64 `dwarf:"off:rb_classext_struct.includer,optional"`

	// st_table (st.c)
	StEntriesStart int64 `dwarf:"off:st_table.entries_start"`
	StEntriesBound int64 `dwarf:"off:st_table.entries_bound"`
	StEntries      int64 `dwarf:"off:st_table.entries"`
	StEntrySize    int64 `dwarf:"size:st_table_entry"`
	StEntryHash    int64 `dwarf:"off:st_table_entry.hash"`
	StEntryKey     int64 `dwarf:"off:st_table_entry.key"`
	StEntryRecord  int64 `dwarf:"off:st_table_entry.record"`

	// the global symbol table (symbol.c)
	SymbolsLastID int64 `dwarf:"off:rb_symbols_t.last_id"`
	SymbolsIDs    int64 `dwarf:"off:rb_symbols_t.ids"`
	IDEntryUnit   int64 `macro:"512"`
	IDEntrySize   int64 `dwarf:"enum:ID_ENTRY_SIZE"`
	IDEntryStr    int64 `dwarf:"enum:ID_ENTRY_STR"`
	IDScopeShift  int64 `dwarf:"enum:RUBY_ID_SCOPE_SHIFT"`
	LastOpID      int64 `dwarf:"enum:tLAST_OP_ID"`

	// enum ruby_value_type, ruby_fl_type, ruby_special_consts
	TMask        int64 `dwarf:"enum:RUBY_T_MASK"`
	TNone        int64 `dwarf:"enum:RUBY_T_NONE"`
	TObject      int64 `dwarf:"enum:RUBY_T_OBJECT"`
	TClass       int64 `dwarf:"enum:RUBY_T_CLASS"`
	TModule      int64 `dwarf:"enum:RUBY_T_MODULE"`
	TFloat       int64 `dwarf:"enum:RUBY_T_FLOAT"`
	TString      int64 `dwarf:"enum:RUBY_T_STRING"`
	TRegexp      int64 `dwarf:"enum:RUBY_T_REGEXP"`
	TArray       int64 `dwarf:"enum:RUBY_T_ARRAY"`
	THash        int64 `dwarf:"enum:RUBY_T_HASH"`
	TStruct      int64 `dwarf:"enum:RUBY_T_STRUCT"`
	TBignum      int64 `dwarf:"enum:RUBY_T_BIGNUM"`
	TFile        int64 `dwarf:"enum:RUBY_T_FILE"`
	TData        int64 `dwarf:"enum:RUBY_T_DATA"`
	TMatch       int64 `dwarf:"enum:RUBY_T_MATCH"`
	TComplex     int64 `dwarf:"enum:RUBY_T_COMPLEX"`
	TRational    int64 `dwarf:"enum:RUBY_T_RATIONAL"`
	TNil         int64 `dwarf:"enum:RUBY_T_NIL"`
	TTrue        int64 `dwarf:"enum:RUBY_T_TRUE"`
	TFalse       int64 `dwarf:"enum:RUBY_T_FALSE"`
	TSymbol      int64 `dwarf:"enum:RUBY_T_SYMBOL"`
	TFixnum      int64 `dwarf:"enum:RUBY_T_FIXNUM"`
	TUndef       int64 `dwarf:"enum:RUBY_T_UNDEF"`
	TImemo       int64 `dwarf:"enum:RUBY_T_IMEMO"`
	TNode        int64 `dwarf:"enum:RUBY_T_NODE"`
	TIClass      int64 `dwarf:"enum:RUBY_T_ICLASS"`
	TZombie      int64 `dwarf:"enum:RUBY_T_ZOMBIE"`
	TMoved       int64 `dwarf:"enum:RUBY_T_MOVED"`
	FlUShift     int64 `dwarf:"enum:RUBY_FL_USHIFT"`
	FlSingleton  int64 `dwarf:"enum:RUBY_FL_SINGLETON"`
	FlFreeze     int64 `dwarf:"enum:RUBY_FL_FREEZE"`
	FlEltsShared int64 `dwarf:"enum:RUBY_ELTS_SHARED"`
	// RArraySharedRootUser is n of RARRAY_SHARED_ROOT_FLAG = FL_USERn
	// (array.c): an Array other Arrays share, whose aux word counts them.
	RArraySharedRootUser int64 `macro:"12,3.1=5"`
	Qnil                 int64 `dwarf:"enum:RUBY_Qnil"`
	Qfalse               int64 `dwarf:"enum:RUBY_Qfalse"`
	Qundef               int64 `dwarf:"enum:RUBY_Qundef"`
	FixnumFlag           int64 `dwarf:"enum:RUBY_FIXNUM_FLAG"`
	ImmediateMask        int64 `dwarf:"enum:RUBY_IMMEDIATE_MASK"`
	SpecialShift         int64 `dwarf:"enum:RUBY_SPECIAL_SHIFT"`
}
