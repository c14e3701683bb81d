// The grammar of the Tessera language (.tsr), spec sections 1-13.
//
// Python's layout rules are not expressible in a context-free lexer, so this grammar declares the
// INDENT and DEDENT tokens and leaves their production to frontend/IndentingTokenSource, which
// wraps the generated lexer: it turns leading whitespace into INDENT/DEDENT, drops NEWLINEs inside
// (), [] and {}, and drops blank lines. Keeping that logic in C++ keeps this file free of
// target-specific actions.
//
// Expressions use Python's explicit precedence levels (not left recursion): ANTLR then parses a
// long chain `a + b + c + ...` with a loop instead of nested rule invocations.
//
// Types are expressions: `Tensor["B", "D", bf16 @accum(f32)]` is a subscript whose last element is
// the matrix-product operator applied to a dtype and a policy; the checker gives it meaning.
grammar Tessera;

tokens { INDENT, DEDENT }

// ---------------------------------------------------------------------------------------------
// Parser
// ---------------------------------------------------------------------------------------------

file_input : (NEWLINE | stmt)* EOF ;

stmt : simple_stmts | compound_stmt ;

simple_stmts : simple_stmt (';' simple_stmt)* ';'? NEWLINE ;

simple_stmt
  : expr_stmt
  | return_stmt
  | pass_stmt
  | break_stmt
  | continue_stmt
  | import_stmt
  | assert_stmt
  | del_stmt
  | raise_stmt
  | global_stmt
  ;

// `x = y = e`, `a, b = t`, `x += 1`, `x: int = 3`, or a bare expression.
expr_stmt
  : target=testlist_star ':' annotation=test ('=' value=testlist_star)?          # annAssign
  | target=testlist_star augassign value=testlist                                 # augAssign
  | testlist_star ('=' testlist_star)+                                            # assign
  | testlist_star                                                                 # exprOnly
  ;

augassign : '+=' | '-=' | '*=' | '@=' | '/=' | '//=' | '%=' | '**=' | '&=' | '|=' | '^=' | '<<=' | '>>=' ;

return_stmt   : 'return' testlist_star? ;
pass_stmt     : 'pass' ;
break_stmt    : 'break' ;
continue_stmt : 'continue' ;
assert_stmt   : 'assert' test (',' test)? ;
del_stmt      : 'del' exprlist ;
raise_stmt    : 'raise' test? ;
global_stmt   : ('global' | 'nonlocal') NAME (',' NAME)* ;

import_stmt
  : 'import' dotted_as_name (',' dotted_as_name)*                                  # importName
  | 'from' dotted_name 'import' ( '*' | '(' import_as_names ')' | import_as_names )   # importFrom
  ;
dotted_as_name  : dotted_name ('as' NAME)? ;
import_as_names : import_as_name (',' import_as_name)* ','? ;
import_as_name  : NAME ('as' NAME)? ;
dotted_name     : NAME ('.' NAME)* ;

compound_stmt
  : if_stmt
  | while_stmt
  | for_stmt
  | with_stmt
  | funcdef
  | classdef
  ;

if_stmt    : 'if' test ':' block elif_clause* else_clause? ;
elif_clause: 'elif' test ':' block ;
else_clause: 'else' ':' block ;
while_stmt : 'while' test ':' block else_clause? ;
for_stmt   : 'for' exprlist 'in' testlist ':' block else_clause? ;
with_stmt  : 'with' with_item (',' with_item)* ':' block ;
with_item  : test ('as' expr)? ;

// Decorators may share a line (`@jit @autodiff`) or stand on lines of their own.
funcdef    : decorator_line* 'def' NAME '(' parameters? ')' ('->' ret=test)? ':' block ;
decorator_line : decorator+ NEWLINE ;
decorator  : '@' dotted_name ('(' arglist? ')')? ;
// Classes are not part of the language; the rule exists so that the checker can say so precisely.
classdef   : decorator_line* 'class' NAME ('(' arglist? ')')? ':' block ;

parameters : parameter (',' parameter)* ','? ;
parameter
  : NAME (':' ann=test)? ('=' dflt=test)?          # plainParam
  | '*' (NAME (':' ann=test)?)?                    # starParam
  | '**' NAME (':' ann=test)?                      # doubleStarParam
  | '/'                                            # slashParam
  ;

block : simple_stmts | NEWLINE INDENT stmt+ DEDENT ;

// ---- expressions ----------------------------------------------------------------------------

test
  : or_test ('if' or_test 'else' test)?
  | lambdef
  ;
test_nocond : or_test | lambdef_nocond ;
lambdef        : 'lambda' lambda_params? ':' test ;
lambdef_nocond : 'lambda' lambda_params? ':' test_nocond ;
lambda_params  : lambda_param (',' lambda_param)* ','? ;
lambda_param   : NAME ('=' dflt=test)? | star='*' NAME? | dstar='**' NAME ;

or_test  : and_test ('or' and_test)* ;
and_test : not_test ('and' not_test)* ;
not_test : 'not' not_test | comparison ;
comparison : expr (comp_op expr)* ;
comp_op : '<' | '>' | '==' | '>=' | '<=' | '!=' | 'in' | 'not' 'in' | 'is' | 'is' 'not' ;

star_expr : '*' expr ;
expr       : xor_expr ('|' xor_expr)* ;
xor_expr   : and_expr ('^' and_expr)* ;
and_expr   : shift_expr ('&' shift_expr)* ;
shift_expr : arith_expr (shift_op arith_expr)* ;
shift_op   : '<<' | '>>' ;
arith_expr : term (arith_op term)* ;
arith_op   : '+' | '-' ;
term       : factor (term_op factor)* ;
term_op    : '*' | '@' | '/' | '%' | '//' ;
factor     : unary_op factor | power ;
unary_op   : '+' | '-' | '~' ;
power      : atom_expr ('**' factor)? ;
atom_expr  : atom trailer* ;

atom
  : '(' testlist_comp? ')'                         # parenAtom
  | '[' testlist_comp? ']'                         # listAtom
  | '{' dictorsetmaker? '}'                        # dictAtom
  | NAME                                           # nameAtom
  | NUMBER                                         # numberAtom
  | STRING+                                        # stringAtom
  | '...'                                          # ellipsisAtom
  | 'None'                                         # noneAtom
  | 'True'                                         # trueAtom
  | 'False'                                        # falseAtom
  ;

testlist_comp : (test | star_expr) ( comp_for | (',' (test | star_expr))* ','? ) ;

trailer
  : '(' arglist? ')'                               # callTrailer
  | '[' subscriptlist ']'                          # subscriptTrailer
  | '.' NAME                                       # attrTrailer
  ;

subscriptlist : subscript (',' subscript)* ','? ;
subscript
  : lo=test? ':' hi=test? (colon2=':' step=test?)? # sliceSubscript
  | test                                           # indexSubscript
  ;

exprlist     : (expr | star_expr) (',' (expr | star_expr))* ','? ;
testlist     : test (',' test)* ','? ;
testlist_star: (test | star_expr) (',' (test | star_expr))* ','? ;

dictorsetmaker
  : dict_entry ( comp_for | (',' dict_entry)* ','? )
  | (test | star_expr) ( comp_for | (',' (test | star_expr))* ','? )
  ;
dict_entry : test ':' test | '**' expr ;

arglist  : argument (',' argument)* ','? ;
argument
  : test comp_for?                                 # positionalArg
  | NAME '=' test                                  # keywordArg
  | '*' test                                       # starArg
  | '**' test                                      # doubleStarArg
  ;

comp_for : 'for' exprlist 'in' or_test comp_iter? ;
comp_iter: comp_for | comp_if ;
comp_if  : 'if' test_nocond comp_iter? ;

// ---------------------------------------------------------------------------------------------
// Lexer
// ---------------------------------------------------------------------------------------------

DEF      : 'def' ;
RETURN   : 'return' ;
IF       : 'if' ;
ELIF     : 'elif' ;
ELSE     : 'else' ;
FOR      : 'for' ;
IN       : 'in' ;
WHILE    : 'while' ;
BREAK    : 'break' ;
CONTINUE : 'continue' ;
PASS     : 'pass' ;
IMPORT   : 'import' ;
FROM     : 'from' ;
AS       : 'as' ;
WITH     : 'with' ;
AND      : 'and' ;
OR       : 'or' ;
NOT      : 'not' ;
ASSERT   : 'assert' ;
TRUE     : 'True' ;
FALSE    : 'False' ;
NONE     : 'None' ;
LAMBDA   : 'lambda' ;
IS       : 'is' ;
DEL      : 'del' ;
RAISE    : 'raise' ;
GLOBAL   : 'global' ;
NONLOCAL : 'nonlocal' ;
CLASS    : 'class' ;

// String literals: an optional prefix (f, r, b, and combinations), then a short or a long
// string. The prefix is part of the token; the front end decides what it means (f-strings are
// parsed there, with the same expression grammar, at the right source offsets).
STRING
  : STRING_PREFIX? ( LONG_STRING_SQ | LONG_STRING_DQ | SHORT_STRING_SQ | SHORT_STRING_DQ )
  ;

NUMBER
  : HEX_INTEGER
  | OCT_INTEGER
  | BIN_INTEGER
  | FLOAT_NUMBER
  | DEC_INTEGER
  ;

NAME : ID_START ID_CONTINUE* ;

NEWLINE : '\r'? '\n' | '\r' ;

ELLIPSIS   : '...' ;
DOT        : '.' ;
STAR       : '*' ;
OPEN_PAREN : '(' ;
CLOSE_PAREN: ')' ;
COMMA      : ',' ;
COLON      : ':' ;
SEMI_COLON : ';' ;
POWER      : '**' ;
ASSIGN     : '=' ;
OPEN_BRACK : '[' ;
CLOSE_BRACK: ']' ;
OR_OP      : '|' ;
XOR        : '^' ;
AND_OP     : '&' ;
LEFT_SHIFT : '<<' ;
RIGHT_SHIFT: '>>' ;
ADD        : '+' ;
MINUS      : '-' ;
DIV        : '/' ;
MOD        : '%' ;
IDIV       : '//' ;
NOT_OP     : '~' ;
OPEN_BRACE : '{' ;
CLOSE_BRACE: '}' ;
LESS_THAN  : '<' ;
GREATER_THAN: '>' ;
EQUALS     : '==' ;
GT_EQ      : '>=' ;
LT_EQ      : '<=' ;
NOT_EQ_1   : '<>' ;
NOT_EQ_2   : '!=' ;
AT         : '@' ;
ARROW      : '->' ;
ADD_ASSIGN : '+=' ;
SUB_ASSIGN : '-=' ;
MULT_ASSIGN: '*=' ;
AT_ASSIGN  : '@=' ;
DIV_ASSIGN : '/=' ;
MOD_ASSIGN : '%=' ;
AND_ASSIGN : '&=' ;
OR_ASSIGN  : '|=' ;
XOR_ASSIGN : '^=' ;
LEFT_SHIFT_ASSIGN : '<<=' ;
RIGHT_SHIFT_ASSIGN: '>>=' ;
POWER_ASSIGN : '**=' ;
IDIV_ASSIGN  : '//=' ;

// Layout: whitespace and comments are kept on the hidden channel so that the indentation pass
// and the language server can see them; the parser never does.
WS        : [ \t\f]+ -> channel(HIDDEN) ;
COMMENT   : '#' ~[\r\n]* -> channel(HIDDEN) ;
LINE_JOIN : '\\' [ \t]* ('\r'? '\n' | '\r') -> channel(HIDDEN) ;

// Anything else is one token of its own, so the lexer never fails; the parser reports it.
// An unterminated string is recognised as such, so the message can say so.
UNTERMINATED_STRING : STRING_PREFIX? ( '\'' ( '\\' . | ~[\\\r\n'] )* | '"' ( '\\' . | ~[\\\r\n"] )* ) ;
ERROR_CHAR : . ;

fragment STRING_PREFIX : [fFrRbBuU] | [fF][rR] | [rR][fF] | [bB][rR] | [rR][bB] ;
fragment SHORT_STRING_SQ : '\'' ( '\\' . | ~[\\\r\n'] )* '\'' ;
fragment SHORT_STRING_DQ : '"' ( '\\' . | ~[\\\r\n"] )* '"' ;
fragment LONG_STRING_SQ  : '\'\'\'' ( '\\' . | ~'\\' )*? '\'\'\'' ;
fragment LONG_STRING_DQ  : '"""' ( '\\' . | ~'\\' )*? '"""' ;

fragment DEC_INTEGER : '0' ('_'? '0')* | [1-9] ('_'? [0-9])* ;
fragment HEX_INTEGER : '0' [xX] ('_'? [0-9a-fA-F])+ ;
fragment OCT_INTEGER : '0' [oO] ('_'? [0-7])+ ;
fragment BIN_INTEGER : '0' [bB] ('_'? [01])+ ;
fragment FLOAT_NUMBER
  : DIGITS? '.' DIGITS EXPONENT?
  | DIGITS '.' EXPONENT?
  | DIGITS EXPONENT
  ;
fragment DIGITS   : [0-9] ('_'? [0-9])* ;
fragment EXPONENT : [eE] [+-]? DIGITS ;

fragment ID_START    : [\p{L}_] ;
fragment ID_CONTINUE : [\p{L}\p{Nd}\p{Mn}\p{Mc}\p{Pc}] ;
